// The rendezvous timeouts both sides default to: the agent's rdzv-conf values
// (agent/config.h) and what musterd uses when a Join leaves a field 0
// (CoordinatorOptions), and the bounds of a lease. The first two are
// torchrun's.
#ifndef MUSTER_RENDEZVOUS_DEFAULTS_H_
#define MUSTER_RENDEZVOUS_DEFAULTS_H_

#include "absl/time/time.h"

namespace muster::rendezvous {

// rdzv-conf join_timeout: how long a round may take to reach min_nodes.
inline constexpr absl::Duration kDefaultJoinTimeout = absl::Seconds(600);
// rdzv-conf last_call_timeout: how long a round that reached min_nodes waits
// for more nodes, up to max_nodes.
inline constexpr absl::Duration kDefaultLastCallTimeout = absl::Seconds(30);
// rdzv-conf lease_timeout and musterd --lease-timeout (docs/architecture.md,
// "Lease fencing"): the default and the bounds, which both sides check.
inline constexpr absl::Duration kDefaultLease = absl::Seconds(5);
inline constexpr absl::Duration kMinLease = absl::Seconds(1);
inline constexpr absl::Duration kMaxLease = absl::Seconds(60);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_DEFAULTS_H_
