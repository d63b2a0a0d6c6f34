// The one form of every error the Jinja interpreter returns, from the lexer, the parser
// and the renderer alike: InvalidArgument "chat template line <line>: <what>", where
// <what> names the construct. Callers (and tests) match on that text.
#ifndef STRATA_TEXT_JINJA_ERROR_H_
#define STRATA_TEXT_JINJA_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace strata::text::jinja {

inline absl::Status TemplateError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_ERROR_H_
