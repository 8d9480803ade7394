#include "rendezvous/src/core/lease.h"

#include "absl/strings/str_cat.h"

namespace muster::rendezvous {

absl::Status ValidateLease(absl::Duration lease, absl::string_view what) {
  if (lease >= kMinLease && lease <= kMaxLease) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " is ", absl::FormatDuration(lease), ": a lease must be from ",
      absl::FormatDuration(kMinLease), " to ", absl::FormatDuration(kMaxLease),
      " (shorter: a loaded node loses its lease and restarts the round; "
      "longer: a silently lost node holds up the survivors)"));
}

absl::Status LeaseOfJoin(int64_t lease_timeout_ms, absl::Duration fallback,
                         absl::Duration* lease) {
  if (lease_timeout_ms == 0) {
    *lease = fallback;
    return absl::OkStatus();
  }
  *lease = absl::Milliseconds(lease_timeout_ms);
  return ValidateLease(*lease,
                       "Join.lease_timeout_ms (rdzv-conf lease_timeout)");
}

}  // namespace muster::rendezvous
