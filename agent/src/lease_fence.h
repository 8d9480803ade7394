// LeaseFence: the agent's side of lease fencing
// (rendezvous/src/core/lease.h has the server's side and the argument).
//
// Every heartbeat (and the Join) takes a sequence number and its local send
// time is kept; when the server answers LeaseRenewed{seq}, the lease runs
// until that send time plus the lease. The send time is never later than the
// server's receipt, and the server declares a silent node lost only a full
// lease after it last heard from it, so this lease ends first. Before it ends
// the agent must have stopped its workers:
//
// clang-format off
//   acked send ─────────── 0.7 L ──────────► fence: SIGTERM ─ 0.2 L ─► SIGKILL ─ 0.1 L ─► lease ends
//                                            (FenceDue)        (FenceGrace)       (slack for the kill,
//                                                                                  the reap, a slow tick)
// clang-format on
//
// With acks about every L/4 and heartbeats every keep_alive_interval, a lease
// is renewed well before the fence; the fence comes only after about 0.45 L of
// silence beyond the usual renewal delay (2.25 s for the default 5 s lease).
//
// Not armed until the first renewal: an agent whose server never renews (the
// in-process rendezvous of --standalone, an older musterd) is never fenced.
//
// Renewals come as LeaseRenewed{seq} and in RoundReady.lease_seq. musterd
// renews only while the agent runs workers: between rounds (no workers) the
// lease runs out unrenewed, which is harmless since only running workers are
// fenced; a round's RoundReady renews it again before its workers start.
// Pure: time comes from a Clock. Thread-safe (heartbeat, reader and main
// threads call it); no allocation after construction.
#ifndef MUSTER_AGENT_SRC_LEASE_FENCE_H_
#define MUSTER_AGENT_SRC_LEASE_FENCE_H_

#include <array>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/clock.h"

namespace muster::agent {

class LeaseFence {
 public:
  // clock must outlive the fence. lease > 0.
  LeaseFence(absl::Duration lease, Clock* clock);

  // A new sequence number (1, 2, ...) for a message about to be sent, with
  // its send time (now) recorded.
  int64_t NextSeq();
  // The server answered `seq`: the lease runs until its send time + lease.
  // Unknown or too old sequence numbers (more than kSlots back) are ignored.
  void OnRenewed(int64_t seq);

  // Whether any renewal came yet.
  bool armed() const;
  // When the lease ends (InfiniteFuture while unarmed).
  absl::Time LeaseEnd() const;
  // When the workers must start stopping: LeaseEnd - 0.3 lease.
  absl::Time FenceAt() const;
  // Whether now is at or past FenceAt.
  bool FenceDue() const;
  // Whether armed with at least d left before FenceAt.
  bool LastsFor(absl::Duration d) const;
  // How long a fenced stop waits after SIGTERM before SIGKILL (0.2 lease).
  absl::Duration FenceGrace() const { return lease_ / 5; }
  absl::Duration lease() const { return lease_; }

 private:
  static constexpr int kSlots = 256;
  struct Sent {
    int64_t seq = 0;
    absl::Time at;
  };
  const absl::Duration lease_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::array<Sent, kSlots> sent_ ABSL_GUARDED_BY(mu_);
  absl::Time lease_end_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_LEASE_FENCE_H_
