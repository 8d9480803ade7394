// Helpers for absl::Status, the error type across every module boundary of
// muster.
//
// Codes carry retry meaning (as in XLA's coordination service):
// clang-format off
//   UNAVAILABLE          the peer or server is not reachable now; retrying may help.
//   ABORTED              the round ended under the caller (a peer was lost); rejoin.
//   FAILED_PRECONDITION  the configuration cannot work (mismatched job sizes, no GPU); do not retry.
//   DEADLINE_EXCEEDED    a wait ran past its deadline.
//   INVALID_ARGUMENT     bad input; the message names the field and the fix.
// clang-format on
#ifndef MUSTER_COMMON_STATUS_H_
#define MUSTER_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#define MUSTER_STATUS_CONCAT_INNER_(a, b) a##b
#define MUSTER_STATUS_CONCAT_(a, b) MUSTER_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define MUSTER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status muster_status_ = (expr);          \
    if (!muster_status_.ok()) return muster_status_; \
  } while (0)

// `lhs = value of expr` when expr (an absl::StatusOr) is OK, else returns its
// status.
#define MUSTER_ASSIGN_OR_RETURN(lhs, expr) \
  MUSTER_ASSIGN_OR_RETURN_IMPL_(           \
      MUSTER_STATUS_CONCAT_(muster_statusor_, __LINE__), lhs, expr)
#define MUSTER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

namespace muster {

// Returns `status` with `context: ` put before its message, keeping the code.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace muster

#endif  // MUSTER_COMMON_STATUS_H_
