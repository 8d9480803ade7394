// The heartbeat budget (docs/architecture.md, "Heartbeat budget"): musterd
// tells its agents how often to heartbeat, so that the heartbeats of every
// agent it serves stay near a fixed rate however many agents there are. Both
// sides use these rules: musterd to choose the interval it suggests (in
// Waiting, RoundReady and LeaseRenewed), the agent to turn a suggestion into
// the interval it uses.
//
// Why it may: since lease fencing, a node that goes silent (hung, or cut off
// with its connection open) is declared lost only after max(heartbeat
// timeout, lease), 5 s by default, and a crashed one at once by its stream's
// end; so a 250 ms heartbeat finds no loss sooner than a 1.25 s one. What the
// interval must keep is the lease: at least 4 heartbeats per lease, and
// renewals (every lease/4, on a heartbeat: rendezvous/src/core/lease.h) that
// fall on heartbeats.
#ifndef MUSTER_RENDEZVOUS_HEARTBEAT_BUDGET_H_
#define MUSTER_RENDEZVOUS_HEARTBEAT_BUDGET_H_

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace muster::rendezvous {

// The agent's default interval (rdzv-conf keep_alive_interval), which a small
// musterd load keeps.
inline constexpr absl::Duration kDefaultHeartbeatInterval =
    absl::Milliseconds(250);

// Heartbeats a second musterd aims at, all agents together: up to 2,000
// agents keep the default interval; 10,000 would get 1.25 s (the lease caps
// it at lease/4: 1.25 s for the default 5 s lease).
inline constexpr int64_t kDefaultHeartbeatBudgetPerSecond = 8000;

// The interval musterd suggests when `agents` are connected: the default
// while agents / budget is below it, else agents / budget, on a 50 ms grid (so
// that one more agent does not change it). budget <= 0: no suggestion (zero).
inline absl::Duration SuggestedHeartbeatInterval(int64_t agents,
                                                 int64_t budget_per_second) {
  if (budget_per_second <= 0) return absl::ZeroDuration();
  const int64_t ms = agents * 1000 / budget_per_second;
  const int64_t grid = 50;
  return std::max(kDefaultHeartbeatInterval,
                  absl::Milliseconds((ms + grid - 1) / grid * grid));
}

// The interval an agent that follows the server uses: its own (`own`) unless
// the server suggests a longer one; never longer than lease/4, and a whole
// fraction of lease/4 (of lease/4, lease/8, lease/12, ... the shortest that
// is not shorter than the suggestion; in whole ms), so that renewals, due
// every lease/4, fall on heartbeats. A zero suggestion (an older musterd)
// keeps `own`.
inline absl::Duration FollowedHeartbeatInterval(absl::Duration own,
                                                absl::Duration lease,
                                                absl::Duration suggested) {
  const absl::Duration cap = lease / 4;
  if (suggested <= own || cap <= own) return own;
  if (suggested >= cap) return cap;
  absl::Duration rest;
  const int64_t k =
      std::max<int64_t>(1, absl::IDivDuration(cap, suggested, &rest));
  return std::max(own, absl::Trunc(cap / k, absl::Milliseconds(1)));
}

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_HEARTBEAT_BUDGET_H_
