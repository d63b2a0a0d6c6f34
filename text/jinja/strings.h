// The Python str operations the Jinja interpreter shares between its lexer (whitespace
// control), filters and string methods. ASCII only, as the templates need; no errors.
#ifndef STRATA_TEXT_JINJA_STRINGS_H_
#define STRATA_TEXT_JINJA_STRINGS_H_

#include <string>
#include <string_view>

namespace strata::text::jinja {

// Python's whitespace, the default of strip() and split().
inline constexpr std::string_view kSpace = " \t\n\r\f\v";

// `s` without the leading (`left`) and / or trailing (`right`) characters in `chars`;
// a view into `s`.
std::string_view Trim(std::string_view s, std::string_view chars, bool left, bool right);

// ASCII upper / lower case.
std::string Upper(std::string s);
std::string Lower(std::string s);

// Every occurrence of `from` replaced by `to`, left to right; `s` itself when `from` is
// empty.
std::string ReplaceAll(std::string s, std::string_view from, std::string_view to);

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_STRINGS_H_
