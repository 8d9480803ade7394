// LeaderGate: whether this musterd serves Sessions and the Store now, and when
// it does not, which replica does. A single musterd always serves. A replica
// (musterd --etcd-endpoints, rendezvous/src/replica/) serves only while it
// holds the etcd election; a standby refuses every call with UNAVAILABLE and
// names the leader in the trailing metadata `muster-leader` (HOST:PORT, the
// leader's --advertise-addr), so a client goes straight there instead of
// trying every replica.
//
// Thread-safe; Check is a lock-free load on every call's path.
#ifndef MUSTER_RENDEZVOUS_SRC_LEADER_GATE_H_
#define MUSTER_RENDEZVOUS_SRC_LEADER_GATE_H_

#include <grpcpp/server_context.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "muster/store/service_hooks.h"

namespace muster::rendezvous {

// The Store service's gate too (store::StoreGate), so that the Session and
// Store services are fenced by one leadership.
class LeaderGate final : public store::StoreGate {
 public:
  // Serving from the start (a single musterd).
  LeaderGate() = default;
  LeaderGate(const LeaderGate&) = delete;
  LeaderGate& operator=(const LeaderGate&) = delete;

  // OK while this musterd serves. Otherwise UNAVAILABLE: "musterd <self> is a
  // standby replica; the leader is <leader>" (or "no replica leads yet (an
  // election is under way); retry in a moment"). Never blocks.
  absl::Status Check() const override;

  // The leader's HOST:PORT when this replica is a standby that knows it;
  // empty otherwise.
  std::string leader() const override;
  // Serving, and (a replica) its leadership confirmed recently enough: see
  // SetValidUntil.
  bool serving() const override;
  // Leads, whether or not the leadership was confirmed lately: while
  // leads() && !serving(), what arrives is held, not refused, and what would
  // leave waits (fenced_inbox.h); a standby (!leads()) refuses. Never blocks.
  bool leads() const override {
    return serving_.load(std::memory_order_acquire);
  }

  // Becomes the leader (serving) or a standby naming `leader` (may be empty:
  // unknown). `self` is this replica's advertised address, for messages.
  // `epoch`: the leader's fencing token, its election revision (0: a single
  // musterd, which has no election); see epoch().
  void Lead(int64_t epoch = 0);
  void StandBy(absl::string_view self, absl::string_view leader);

  // A leader acts only until `until` (steady clock) unless renewed: a
  // replica's leadership is confirmed by etcd renewals, and one paused past
  // this stops serving by its own clock before another replica can lead
  // (rendezvous/src/replica/replica.h). Never set on a single musterd.
  void SetValidUntil(std::chrono::steady_clock::time_point until);
  // How many times a confirmation came after the previous one had run out:
  // each is a lapse during which nothing was acted on (a paused process, etcd
  // slow). The server restarts its silence clocks after one. Never blocks.
  int64_t lapses() const { return lapses_.load(std::memory_order_acquire); }

  // The epoch of this musterd's leadership: its etcd election revision (a
  // replica leads at most once in its life), or 0 for a single musterd.
  // Every Session and Store answer carries it, so a client that has seen a
  // newer leader ignores what an older one still sends (docs/architecture.md,
  // "Fencing"). Never blocks.
  int64_t epoch() const override {
    return epoch_.load(std::memory_order_acquire);
  }

  // Adds `muster-leader` to a server call's trailing metadata when this
  // replica is a standby that knows the leader. Call before finishing the
  // call with Check()'s status.
  void AddLeaderTrailer(grpc::ServerContextBase& context) const;

 private:
  std::atomic<bool> serving_{true};
  // Nanoseconds of the steady clock's epoch; 0: no limit.
  std::atomic<int64_t> valid_until_ns_{0};
  std::atomic<int64_t> epoch_{0};
  std::atomic<int64_t> lapses_{0};
  mutable absl::Mutex mu_;
  std::string self_ ABSL_GUARDED_BY(mu_);
  std::string leader_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_LEADER_GATE_H_
