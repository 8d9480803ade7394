// Lease fencing, musterd's side (docs/architecture.md, "Lease
// fencing"). Each agent holds a lease on its place in the running round. The
// server renews it by answering the agent's heartbeats with LeaseRenewed{seq}
// (at most about every lease/4, so 10,000 agents cost a few thousand small
// writes a second), and declares a SILENT node lost only once a full lease has
// passed since it last heard from it. The agent measures the same lease from
// the send time of the last heartbeat the server acknowledged, which is never
// later than the server's receipt of it, so the agent's lease always ends
// first: it stops its workers before the server can give their ranks to a new
// round. A closed stream (FIN/RST: the agent is gone for sure) is still acted
// on at once.
#ifndef MUSTER_RENDEZVOUS_SRC_LEASE_H_
#define MUSTER_RENDEZVOUS_SRC_LEASE_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "muster/rendezvous/defaults.h"
#include "rendezvous/src/core/liveness_table.h"

namespace muster::rendezvous {

// kMinLease, kMaxLease and kDefaultLease are in muster/rendezvous/defaults.h.

// OK, or INVALID_ARGUMENT naming `what` (the flag or field), the value and
// the bounds.
absl::Status ValidateLease(absl::Duration lease, absl::string_view what);

// The lease of a Join: its lease_timeout_ms, or `fallback` when 0. Errors:
// INVALID_ARGUMENT for a value outside [kMinLease, kMaxLease].
absl::Status LeaseOfJoin(int64_t lease_timeout_ms, absl::Duration fallback,
                         absl::Duration* lease);

// How long the server waits without hearing from a node before it declares it
// lost: the heartbeat timeout, but never less than the lease (the agent may
// still run its workers until then).
inline absl::Duration SilentLossTimeout(absl::Duration heartbeat_timeout,
                                        absl::Duration lease) {
  return std::max(heartbeat_timeout, lease);
}

// Renewals: four per lease, each on the first heartbeat (with a seq) at or
// after its due time. The first is due lease/4 after the Join, less lease/32
// of slack; each next one lease/4 after the last one's due time, on that
// schedule rather than from the heartbeat that took it, so that an agent
// heartbeating exactly every lease/4 (the longest interval the heartbeat
// budget lets it follow) is renewed on each heartbeat despite jitter. After a
// late heartbeat (past lease/8) the next renewal is at least lease/8 away.
inline absl::Time FirstLeaseRenewal(absl::Time now, absl::Duration lease) {
  return now + lease / 4 - lease / 32;
}
inline absl::Time NextLeaseRenewal(absl::Time due, absl::Time now,
                                   absl::Duration lease) {
  return std::max(due + lease / 4, now + lease / 8);
}

// One stream's lease, apart from the Coordinator's lock (in a ShardedTable,
// liveness_table.h): a heartbeat decides its renewal from it alone. Fields
// are relaxed atomics; one stream's events come one at a time, so a
// heartbeat does not race with itself, and the Coordinator changes the
// flags under its lock.
//
// Renewals only serve running workers (the fence stops workers, nothing
// else): an agent that takes RoundReady.lease_seq as a renewal
// (Join.lease_from_round_ready) gets no LeaseRenewed while it waits for a
// round, only while in_round. At 10,000 agents that saves a write per
// heartbeat while the round forms. An older agent (renew_waiting) is renewed
// throughout, as before: it would not start its workers under a lease it
// last heard of before the wait.
struct StreamLease {
  AtomicTime due;  // when the next renewal is due
  RelaxedAtomic<int64_t> lease_ms;
  RelaxedAtomic<int64_t> last_seq;  // of the last Join/Heartbeat received
  // A member of a running round (its RoundReady is sent), or a node that
  // claims running workers; cleared by Restart and by a Join without them.
  RelaxedAtomic<bool> in_round;
  RelaxedAtomic<bool> renew_waiting;  // an older agent: renew while waiting

  // A heartbeat with `seq` (not 0) arrived at now: records it, and returns
  // whether to answer LeaseRenewed{seq}.
  bool OnHeartbeat(int64_t seq, absl::Time now) {
    last_seq = seq;
    if (!in_round.Get() && !renew_waiting.Get()) return false;
    const absl::Time d = due.Get();
    if (now < d) return false;
    due = NextLeaseRenewal(d, now, absl::Milliseconds(lease_ms.Get()));
    return true;
  }
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_LEASE_H_
