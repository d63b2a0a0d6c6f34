// TokenVocabulary: the text <-> token ID half of a model directory's tokenizer, the part
// its tokenizer file defines. The chat template and the stop tokens are the loader's
// (tokenizer_loader.h); a vocabulary knows neither.
#ifndef STRATA_TEXT_TOKEN_VOCABULARY_H_
#define STRATA_TEXT_TOKEN_VOCABULARY_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::text {

// Implemented by BpeTokenizer (tokenizer.json) and SentencePieceTokenizer
// (tokenizer.model). Implementations are thread-safe after construction.
class TokenVocabulary {
 public:
  virtual ~TokenVocabulary() = default;
  // The token IDs of `text` as `transformers` encodes it with add_special_tokens=False: no
  // BOS/EOS added; added and special tokens written in the text are recognised.
  // InvalidArgument if `text` is not valid UTF-8.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // One more than the largest token ID.
  virtual int vocab_size() const = 0;
  // The bytes a token decodes to ("▁" as a space, "<0xXX>" as that byte). Empty for special
  // tokens and IDs outside the vocabulary.
  virtual std::string_view TokenBytes(int32_t id) const = 0;
  // True for special tokens (`</s>`, `<|eot_id|>`, ...).
  virtual bool IsSpecial(int32_t id) const = 0;
  // True when the reference decoder drops the first space of a decoded text (the
  // SentencePiece form, whose first word token stands for " word").
  virtual bool drops_leading_space() const = 0;
  // The ID of a token written as in the tokenizer's files (`</s>`, `<|im_end|>`); nullopt
  // if there is none.
  virtual std::optional<int32_t> TokenId(std::string_view written) const = 0;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKEN_VOCABULARY_H_
