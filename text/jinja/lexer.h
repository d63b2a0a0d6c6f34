// The Jinja lexer, in two steps:
//   Scan          the template's text -> text, `{{ expression }}` and `{% statement %}`
//                 chunks (comments dropped), with the whitespace control transformers
//                 uses: the trailing newline dropped, lstrip_blocks, trim_blocks, and
//                 `-` on a tag trimming the whitespace beside it;
//   LexExpression one tag's content -> tokens (names, string / int / float literals,
//                 operators), ending with a kEnd token.
// Errors are InvalidArgument "chat template line N: ..." (see error.h) naming what is
// wrong: an unclosed tag, an unterminated string, an unexpected character, an integer
// out of range. Pure functions; thread-safe.
#ifndef STRATA_TEXT_JINJA_LEXER_H_
#define STRATA_TEXT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::text::jinja {

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // name, operator, or the string literal's value
  int64_t i = 0;
  double f = 0;
};

struct Chunk {
  enum class Kind { kText, kExpr, kStmt } kind;
  std::string text;
  int line;
};

// The template as text, expression and statement chunks, with Jinja's whitespace rules
// applied the way transformers configures them (and @huggingface/jinja mirrors). Each
// chunk carries the template line it starts on.
absl::StatusOr<std::vector<Chunk>> Scan(std::string src);

// The tokens of one tag's content `s`, which starts on template line `line`; the last
// token is always kEnd.
absl::StatusOr<std::vector<Token>> LexExpression(std::string_view s, int line);

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_LEXER_H_
