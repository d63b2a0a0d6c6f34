// SentencePieceTokenizer: a tokenizer.model (SentencePiece; Llama 2, Mistral) read through
// the SentencePiece library, encoded as `transformers`' LlamaTokenizer encodes with
// add_special_tokens=False:
//   - added and special tokens written in the text are cut out first, longest first: the
//     tokens of tokenizer_config.json's added_tokens_decoder, and the model's control
//     pieces (<s>, </s>) and <unk>;
//   - legacy ("legacy": true, or absent: transformers' default): the library encodes each
//     remaining segment as it is, so each one gets the model's dummy prefix "▁";
//   - non-legacy ("legacy": false, as in Llama 2's files): the model's dummy prefix is
//     off; a segment at the start of the text gets "▁" (add_prefix_space, default true)
//     and a segment after a special token is encoded as the middle of a text.
// No BOS is added: a chat template writes its own (apply_chat_template encodes with
// add_special_tokens=False, so add_bos_token does not apply to chat).
#ifndef STRATA_TEXT_SENTENCEPIECE_TOKENIZER_H_
#define STRATA_TEXT_SENTENCEPIECE_TOKENIZER_H_

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

class SentencePieceModel;

// A token of tokenizer_config.json's added_tokens_decoder.
struct SentencePieceAddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
};

// What tokenizer_config.json says about encoding (see the file comment).
struct SentencePieceOptions {
  bool legacy = true;
  bool add_prefix_space = true;  // non-legacy only
  std::vector<SentencePieceAddedToken> added_tokens;
};

// Thread-safe after construction: every method is const.
class SentencePieceTokenizer final : public TokenVocabulary {
 public:
  // `serialized`: the bytes of a tokenizer.model. InvalidArgument when the library does not
  // accept them (the message gives its reason) or an added token has a negative ID or empty
  // content; Unimplemented when the library is not available (the message says why: see
  // SentencePieceModel::Available).
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromModel(std::string_view serialized,
                                                                           const SentencePieceOptions& options);
  ~SentencePieceTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // The larger of the model's piece count and one more than the largest added token ID.
  int vocab_size() const override { return static_cast<int>(token_bytes_.size()); }
  // Pieces with "▁" as a space, byte pieces (<0xXX>) as their byte, non-special added
  // tokens as their content; empty for control pieces, <unk> and special added tokens.
  std::string_view TokenBytes(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  // True when an encoded text starts with "▁" (the model's dummy prefix, or
  // add_prefix_space when non-legacy), which the reference decoder drops.
  bool drops_leading_space() const override { return drops_leading_space_; }
  std::optional<int32_t> TokenId(std::string_view written) const override;
  // The model's <s> and </s> pieces as written ("" when it has none): the bos_token and
  // eos_token of a directory whose tokenizer_config.json does not name them.
  std::string bos_piece() const;
  std::string eos_piece() const;

 private:
  struct Recognised {
    std::string content;
    int32_t id;
  };
  SentencePieceTokenizer() = default;
  // Encodes one segment with no recognised token in it; `at_start`: it begins the text.
  void EncodeSegment(std::string_view segment, bool at_start, std::vector<int32_t>& out) const;

  std::unique_ptr<SentencePieceModel> model_;
  bool legacy_ = true;
  bool add_prefix_space_ = true;
  bool drops_leading_space_ = false;
  size_t unk_prefix_pieces_ = 0;          // non-legacy: the pieces of the model's "<unk>" spelled out
  std::vector<std::string> token_bytes_;  // by ID
  std::vector<bool> special_;             // by ID
  std::vector<Recognised> recognised_;    // longest first
  bool recognised_first_byte_[256] = {};
  absl::flat_hash_map<std::string, int32_t> added_;  // added tokens by content
};

}  // namespace strata::text

#endif  // STRATA_TEXT_SENTENCEPIECE_TOKENIZER_H_
