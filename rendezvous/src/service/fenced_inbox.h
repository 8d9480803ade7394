// FencedInbox: what reaches a replica's Coordinator while the replica leads
// but cannot confirm it (LeaderGate::leads() && !serving(): etcd slow, or
// this process paused and not yet sure it still leads) waits here, in order,
// instead of being acted on. Once a renewal confirms the leadership again,
// the tick loop replays it; a replica that learns it was deposed exits (or
// stands by) and what waited here is never acted on.
//
// Why replaying is safe: a confirmed renewal proves the election lease was
// alive when it was sent, and a lease that was alive never came back from
// the dead, so no other replica led in between. What arrived meanwhile
// happened under this leader; only deciding it had to wait.
//
// Order: an event that arrives while anything waits waits too, so one
// stream's events reach the Coordinator in the order they came (events of
// different streams were never ordered).
//
// Thread-safe.
#ifndef MUSTER_RENDEZVOUS_SRC_FENCED_INBOX_H_
#define MUSTER_RENDEZVOUS_SRC_FENCED_INBOX_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/src/service/leader_gate.h"

namespace muster::rendezvous {

class FencedInbox {
 public:
  FencedInbox() = default;
  FencedInbox(const FencedInbox&) = delete;
  FencedInbox& operator=(const FencedInbox&) = delete;

  // `gate` must outlive the inbox; none (the default): nothing is ever
  // held. Before the server starts.
  void SetGate(const LeaderGate* gate) { gate_ = gate; }

  // When the event must wait (the gate does not serve, or earlier events
  // wait or are being replayed), stores make() (a callable that acts on it
  // later) and returns true; otherwise returns false and the caller acts
  // now. Does not block beyond the inbox's lock.
  //
  // The common case (confirmed, nothing waiting) takes no lock: every
  // heartbeat of 10,000 agents passes here. Events of one stream come one at
  // a time, after the previous one's Handle returned, so a stream whose last
  // event was held sees `busy_` set; events of different streams have no
  // order to keep.
  template <typename Make>
  bool HoldIfFenced(Make make) ABSL_LOCKS_EXCLUDED(mu_) {
    if (gate_ == nullptr) return false;
    if (gate_->serving() && busy_.load(std::memory_order_acquire) == 0) {
      return false;
    }
    absl::MutexLock lock(&mu_);
    if (gate_->serving() && !replaying_ && held_.empty()) return false;
    held_.push_back(make());
    busy_.store(1, std::memory_order_release);
    ++held_total_;
    return true;
  }

  // While the gate serves, acts on what waits, in order (events held during
  // the replay included). Returns how many were acted on. Call from one
  // thread with no lock held that an event's action takes.
  int64_t Replay() ABSL_LOCKS_EXCLUDED(mu_) {
    int64_t n = 0;
    mu_.Lock();
    if (replaying_ || held_.empty()) {
      mu_.Unlock();
      return 0;
    }
    replaying_ = true;
    while (!held_.empty() && gate_ != nullptr && gate_->serving()) {
      std::function<void()> act = std::move(held_.front());
      held_.pop_front();
      mu_.Unlock();  // the action takes the stream's and the Coordinator's
      act();
      ++n;
      mu_.Lock();
    }
    replaying_ = false;
    if (held_.empty()) busy_.store(0, std::memory_order_release);
    mu_.Unlock();
    return n;
  }

  // Forgets what waits (this replica stands by: none of it may be acted
  // on). Returns how many were dropped.
  int64_t Drop() ABSL_LOCKS_EXCLUDED(mu_) {
    std::deque<std::function<void()>> gone;
    {
      absl::MutexLock lock(&mu_);
      gone.swap(held_);
      if (!replaying_) busy_.store(0, std::memory_order_release);
    }
    return static_cast<int64_t>(gone.size());
  }

  int64_t waiting() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(held_.size());
  }
  // Events held since the start (metrics, tests).
  int64_t held_total() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return held_total_;
  }

 private:
  const LeaderGate* gate_ = nullptr;  // set before serving
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> held_ ABSL_GUARDED_BY(mu_);
  bool replaying_ ABSL_GUARDED_BY(mu_) = false;
  // 1 while anything waits or is being replayed (set and cleared under mu_,
  // read without it by HoldIfFenced's fast path).
  std::atomic<int> busy_{0};
  int64_t held_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_FENCED_INBOX_H_
