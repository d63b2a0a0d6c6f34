// STRATA_RETURN_IF_ERROR / STRATA_ASSIGN_OR_RETURN (Debian 12's Abseil has none).
#ifndef STRATA_BASE_STATUS_MACROS_H_
#define STRATA_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STRATA_RETURN_IF_ERROR(expr)                        \
  do {                                                      \
    if (::absl::Status strata_status_ = (expr); !strata_status_.ok()) { \
      return strata_status_;                                \
    }                                                       \
  } while (0)

#define STRATA_STATUS_CONCAT_INNER(a, b) a##b
#define STRATA_STATUS_CONCAT(a, b) STRATA_STATUS_CONCAT_INNER(a, b)
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL(STRATA_STATUS_CONCAT(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = *std::move(tmp)

#endif  // STRATA_BASE_STATUS_MACROS_H_
