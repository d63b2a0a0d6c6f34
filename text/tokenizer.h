// Tokenizers and chat templates, and the streaming decoder that turns generated tokens
// into valid UTF-8 text.
#ifndef STRATA_TEXT_TOKENIZER_H_
#define STRATA_TEXT_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata::text {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// Thread-safe after construction (all methods are const).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int vocab_size() const = 0;
  // Renders a conversation with the model's chat template, ending with the prompt for
  // the assistant's next message. InvalidArgument for an empty conversation, an unknown
  // role, or content that is not valid UTF-8 (the message says which message).
  virtual absl::StatusOr<std::vector<int32_t>> RenderChat(
      absl::Span<const ChatMessage> messages) const = 0;
  // The raw bytes a token stands for (empty for special tokens).
  virtual std::string_view TokenBytes(int32_t token) const = 0;
  // True for tokens that end the assistant's turn.
  virtual bool IsStopToken(int32_t token) const = 0;
  // Tokens a random built-in model should not produce (see ModelWeights::Random).
  virtual std::vector<int32_t> SilentTokens() const { return {}; }
  // The token IDs of plain text: no chat template, no BOS; special tokens written in the
  // text are recognised. InvalidArgument for text that is not valid UTF-8; Unimplemented
  // for a tokenizer with no text form (TokenIdsOnlyTokenizer).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // True when a generated text drops its first leading space, as the reference decoder
  // does for SentencePiece-style vocabularies (Llama 2, Mistral: the first token of an
  // answer stands for " word").
  virtual bool DropsLeadingSpace() const { return false; }
  // The token a plain text starts with (for scoring a text, as `strata ppl` does), when
  // the tokenizer knows one.
  virtual std::optional<int32_t> BosToken() const { return std::nullopt; }
};

// The built-in model's tokenizer: one token per byte (0..255) and six special tokens.
// Template: <bos> then for each message <|role|> content <|end|>, then <|assistant|>.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kSystem = 258;
  static constexpr int32_t kUser = 259;
  static constexpr int32_t kAssistant = 260;
  static constexpr int32_t kEnd = 261;
  static constexpr int kVocabSize = 264;

  int vocab_size() const override { return kVocabSize; }
  absl::StatusOr<std::vector<int32_t>> RenderChat(
      absl::Span<const ChatMessage> messages) const override;
  std::string_view TokenBytes(int32_t token) const override;
  bool IsStopToken(int32_t token) const override { return token == kEnd || token == kEos; }
  // Everything but printable ASCII, newline and the end-of-turn token.
  std::vector<int32_t> SilentTokens() const override;
  std::optional<int32_t> BosToken() const override { return kBos; }
  // One token per byte (the special tokens have no text form).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
};

// For a model directory whose tokenizer strata cannot read yet: the API takes raw
// token_ids only. RenderChat is InvalidArgument saying so; tokens carry no text; the stop
// tokens are the config's eos_token_id(s).
class TokenIdsOnlyTokenizer final : public Tokenizer {
 public:
  TokenIdsOnlyTokenizer(int vocab_size, std::vector<int32_t> stop_tokens)
      : vocab_size_(vocab_size), stop_tokens_(std::move(stop_tokens)) {}
  int vocab_size() const override { return vocab_size_; }
  absl::StatusOr<std::vector<int32_t>> RenderChat(absl::Span<const ChatMessage> messages) const override;
  std::string_view TokenBytes(int32_t) const override { return {}; }
  bool IsStopToken(int32_t token) const override;

 private:
  int vocab_size_;
  std::vector<int32_t> stop_tokens_;
};

// True when `text` is valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Turns a stream of token bytes into valid UTF-8: a character split across tokens is
// held until its last byte arrives; bytes that cannot start or continue a character
// become U+FFFD. Not thread-safe; one per generated stream.
class Utf8StreamDecoder {
 public:
  // Appends `bytes` and returns the text that is now complete.
  std::string Feed(std::string_view bytes);
  // Returns whatever is held (as U+FFFD) at the end of the stream.
  std::string Flush();

 private:
  std::string pending_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKENIZER_H_
