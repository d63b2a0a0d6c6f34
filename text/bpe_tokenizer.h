// BpeTokenizer: the BPE model of a Hugging Face `tokenizer.json`, in its two forms:
//   - byte-level BPE (Llama 3, Qwen2): an optional NFC normalizer, a regex pre-tokenizer
//     (`Split` with a PCRE-compatible pattern, `ByteLevel`), merges over bytes;
//   - SentencePiece-style BPE (Llama 2, Mistral): a `Prepend`/`Replace` normalizer or a
//     `Metaspace` pre-tokenizer, merges over characters, `<0xXX>` byte fallback.
// Encoding follows `tokenizers` (Rust) `encode(text, add_special_tokens=false)`: added
// tokens (special or not) are cut out of the text first, each remaining segment is
// normalized, pre-tokenized and merged by rank (lowest rank first, leftmost on ties).
#ifndef STRATA_TEXT_BPE_TOKENIZER_H_
#define STRATA_TEXT_BPE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "text/token_vocabulary.h"

namespace strata::text {

class RegexSplitter;  // PCRE2, defined in bpe_tokenizer.cc

// Thread-safe after construction: every method is const and touches no shared state.
class BpeTokenizer final : public TokenVocabulary {
 public:
  // Parses the text of a tokenizer.json. InvalidArgument naming the component or field
  // when the JSON is malformed, the model is not BPE, or a normalizer / pre-tokenizer /
  // option is one this class does not implement (it refuses rather than guesses).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(std::string_view json_text);
  ~BpeTokenizer() override;

  // The token IDs of `text` (no BOS/EOS added; added tokens written in the text are
  // recognised). InvalidArgument if `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;

  // One more than the largest token ID of the vocabulary and the added tokens.
  int vocab_size() const override { return vocab_size_; }
  // The bytes a token decodes to: byte-level tokens their bytes, SentencePiece pieces
  // with `▁` as a space and `<0xXX>` as that byte, non-special added tokens their
  // content. Empty for special tokens and IDs outside the vocabulary.
  std::string_view TokenBytes(int32_t id) const override;
  // True for added tokens marked `special` (`<|eot_id|>`, `</s>`, ...).
  bool IsSpecial(int32_t id) const override;
  // True when the file's decoder drops the first space of a decoded text (a `Strip`
  // decoder with start >= 1, or a `Metaspace` decoder that prepends on encode): the
  // SentencePiece form, whose first word token stands for " word".
  bool drops_leading_space() const override { return drops_leading_space_; }
  // The ID of an added token or vocabulary entry given as it is written in
  // tokenizer.json (`<|im_end|>`, `</s>`); nullopt if there is none.
  std::optional<int32_t> TokenId(std::string_view written) const override;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
  };
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  enum class Normalizer { kNfc, kPrepend, kReplace };
  struct NormalizerStep {
    Normalizer kind;
    std::string a, b;  // Prepend: a; Replace: a -> b
  };
  enum class PreTokenizer { kSplit, kByteLevelSplit, kMetaspace };
  struct PreTokenizerStep {
    PreTokenizer kind;
    std::shared_ptr<RegexSplitter> regex;  // kSplit, kByteLevelSplit
    bool removed = false;                  // kSplit: matches are dropped, not kept
    std::string prepend_scheme;            // kMetaspace: always, first, never
    bool split = false;                    // kMetaspace: a piece starts at each ▁
    bool add_prefix_space = false;         // kByteLevelSplit
  };

  BpeTokenizer() = default;
  // Encodes one segment with no added tokens in it; `at_start`: it begins the input.
  void EncodeSegment(std::string_view segment, bool at_start, std::vector<int32_t>& out) const;
  // Merges one pre-tokenized piece (in the model's domain: bytes or SentencePiece text).
  void EncodePiece(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t LookupPair(int32_t a, int32_t b, int32_t* merged) const;

  bool byte_level_ = false;    // merges over bytes (GPT-2 byte-to-unicode vocabulary)
  bool drops_leading_space_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;  // a whole piece found in the vocabulary is one token
  int32_t unk_id_ = -1;
  int vocab_size_ = 0;
  std::vector<NormalizerStep> normalizers_;
  std::vector<PreTokenizerStep> pre_tokenizers_;
  // Vocabulary keyed by the token in the model's domain: raw bytes for byte-level,
  // the piece's UTF-8 text (with ▁) for SentencePiece-style.
  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<std::string, int32_t> written_;  // as written in tokenizer.json
  absl::flat_hash_map<uint64_t, Merge> merges_;         // (left id << 32 | right id)
  int32_t byte_ids_[256];  // byte-level: the token of each byte; fallback: <0xXX>
  std::vector<std::string> token_bytes_;  // by ID
  std::vector<bool> special_;             // by ID
  std::vector<AddedToken> added_;         // longest first
  bool added_first_byte_[256] = {};
};

}  // namespace strata::text

#endif  // STRATA_TEXT_BPE_TOKENIZER_H_
