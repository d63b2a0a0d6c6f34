// What the Jinja renderer knows of values by name, apart from filters and tests:
//   Builtin  the global functions raise_exception, namespace and range;
//   Attr     `.name`: string methods (strip, lstrip, rstrip, startswith, endswith, upper,
//            lower, title, replace, split), dict methods (items, keys, values, get) and
//            dict members;
//   Item     `[key]`: dict members and list / string indices (negative from the end);
//   Binary   the binary operators, with Python's semantics.
// `line` is the template line of the expression, for errors: InvalidArgument "chat
// template line N: ..." (error.h) naming the construct and the kinds involved. Values
// Jinja leaves undefined (a missing member, an index out of range, an unknown global)
// are an undefined Value, not an error. Functions returned here fail without a line;
// the renderer adds it where they are called. Thread-safe.
#ifndef STRATA_TEXT_JINJA_BUILTINS_H_
#define STRATA_TEXT_JINJA_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "text/jinja/value.h"

namespace strata::text::jinja {

// The global function `name`, or undefined when there is none.
absl::StatusOr<Value> Builtin(const std::string& name, int line);

// `obj.name`. An error for an undefined or None `obj` and for unsupported string methods.
absl::StatusOr<Value> Attr(const Value& obj, const std::string& name, int line);

// `obj[key]`; a string key is Attr.
absl::StatusOr<Value> Item(const Value& obj, const Value& key, int line);

// `a <op> b` for op in == != in "not in" ~ < <= > >= + - * / // %.
absl::StatusOr<Value> Binary(const std::string& op, const Value& a, const Value& b, int line);

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_BUILTINS_H_
