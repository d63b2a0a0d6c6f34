// The Jinja parser: a template's source -> its statement tree (ast.h), a kBlock node.
//
// Statements: if / elif / else, for ... in ... [if ...] (with else), set (a name or a
// namespace attribute), break, continue; `generation` / `endgeneration` markers are
// skipped. Expressions: literals, names, `.attr`, `[key]`, slices, calls, `|filter`,
// `is [not] test`, `not and or`, comparisons and `in`, `+ - * / // % ~`, `a if c else b`,
// with Jinja's precedence. Which filters, tests and functions exist is the renderer's
// business, not the parser's.
//
// Errors: InvalidArgument "chat template line N: ..." (error.h) naming the construct —
// an unsupported statement, a missing `{% endif %}`, an unexpected token and where.
// A pure function; thread-safe.
#ifndef STRATA_TEXT_JINJA_PARSER_H_
#define STRATA_TEXT_JINJA_PARSER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "text/jinja/ast.h"

namespace strata::text::jinja {

absl::StatusOr<Node> Parse(std::string_view source);

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_PARSER_H_
