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
// The agent's default lease when it is given several musterd replicas
// (--rdzv-endpoint=H1:P1,H2:P2): a leader that dies or freezes is replaced
// only when its etcd election lease (2 s) expires, up to 2.5 s later, and the
// agent's fence comes as early as 0.45 lease after that (0.7 lease after
// the last renewed heartbeat, sent up to lease/4 + a heartbeat before): 5 s
// would fence at 2.25 s. 10 s fences no earlier than 4.25 s, leaving the new
// leader about 1.5 s to load its state and the agent to rejoin.
// docs/architecture.md, "Following the leader".
inline constexpr absl::Duration kDefaultReplicatedLease = absl::Seconds(10);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_DEFAULTS_H_
