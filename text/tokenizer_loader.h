// LoadTokenizer: the tokenizer and chat template of a Hugging Face model directory.
//
// Files read (all in `dir`):
//   tokenizer.json          the BPE model (BpeTokenizer: Llama 3, Qwen2, Llama 2, Mistral);
//                           read first when both tokenizer files are present
//   tokenizer.model         otherwise: a SentencePiece model (SentencePieceTokenizer, through
//                           the SentencePiece library: Llama 2 / Mistral repositories
//                           without tokenizer.json)
//   tokenizer_config.json   chat_template, bos_token, eos_token (strings or {"content": ...});
//                           for tokenizer.model also legacy, add_prefix_space and
//                           added_tokens_decoder, and bos/eos default to the model's <s>, </s>
//   config.json             eos_token_id (a number or a list)
//   generation_config.json  eos_token_id (a number or a list), when present
// The stop tokens are the union of every eos_token_id, the eos_token, and the template's
// end-of-turn markers (<|eot_id|>, <|im_end|>, <|end|>, <|eom_id|>) that are special
// tokens of the vocabulary: a directory without generation_config.json still stops at
// the end of the assistant's turn.
#ifndef STRATA_TEXT_TOKENIZER_LOADER_H_
#define STRATA_TEXT_TOKENIZER_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/tokenizer.h"

namespace strata::text {

// True when `dir` holds a tokenizer file LoadTokenizer reads: tokenizer.json, or
// tokenizer.model when this process can use the SentencePiece library
// (SentencePieceModel::Available).
bool HasTokenizerFile(const std::string& dir);

// For the start-up log of a directory HasTokenizerFile refuses: why it has no tokenizer
// ("DIR has no tokenizer.json or tokenizer.model", or why its tokenizer.model is not read:
// strata built without the SentencePiece library, or the library unusable here).
std::string MissingTokenizerReason(const std::string& dir);

// The directory's tokenizer. Its RenderChat renders the chat template, then encodes the
// text as `transformers`' apply_chat_template(tokenize=True) does (special tokens in the
// rendered text are recognised, no BOS added beyond the template's own).
//   NotFound         no tokenizer.json or tokenizer.model in `dir`.
//   Unimplemented    only a tokenizer.model, and the SentencePiece library is not available
//                    (the message says why).
//   InvalidArgument  a file is malformed (the message names it; a tokenizer.model the
//                    library does not accept included), the tokenizer uses a component
//                    BpeTokenizer does not implement, or the chat template uses a construct
//                    ChatTemplate does not support (the message names it and its line):
//                    such a model is refused rather than prompted wrongly.
// A directory with no chat_template loads; its RenderChat is InvalidArgument saying to
// send token_ids (Encode and decoding still work). `*note` (may be null) receives one
// line for the start-up log: the template family recognised and the stop tokens.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir, std::string* note = nullptr);

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKENIZER_LOADER_H_
