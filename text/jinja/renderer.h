// The Jinja renderer: walks a parsed template (ast.h) with the given global variables and
// returns the text it prints. It evaluates expressions, runs the statements (loops with
// loop.index0 / index / first / last / length / revindex / revindex0 / previtem /
// nextitem, scopes that keep a loop's `set` inside it, break / continue) and applies the
// filters (trim, upper, lower, capitalize, replace, length / count, string, safe,
// default / d, first, last, list, join, tojson) and tests (defined, undefined, none,
// string, number, integer, float, boolean, true, false, mapping, sequence, iterable,
// callable, odd, even, eq / equalto / sameas); the rest by name is in builtins.h.
//
// Errors: InvalidArgument "chat template line N: ..." (error.h) naming the construct for
// an unsupported filter / test / function or a type error; "chat template line N raised:
// <message>" for the template's own raise_exception(<message>). A render has its own
// state: one tree may be rendered by many threads at once.
#ifndef STRATA_TEXT_JINJA_RENDERER_H_
#define STRATA_TEXT_JINJA_RENDERER_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace strata::text::jinja {

absl::StatusOr<std::string> Render(const Node& root, std::map<std::string, Value> globals);

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_RENDERER_H_
