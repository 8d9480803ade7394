// DeadlineQueue: which connections' heartbeat deadlines have passed, without
// scanning every connection.
//
// A heartbeat moves a deadline later; it is the commonest event (10,000 agents
// at the default 250 ms send 40,000 a second), so it must not touch the queue.
// The queue is therefore lazy: it holds at most one live entry per key, at a
// deadline no later than the key's true one. When an entry comes due, the
// caller compares it with the true deadline: passed -> expired; not yet ->
// re-armed at the true deadline; gone -> forgotten. Each connection is thus
// looked at about once per heartbeat timeout, not once per tick, and a
// heartbeat costs nothing here.
//
// Not thread-safe: the Coordinator holds it under its lock.
#ifndef MUSTER_RENDEZVOUS_SRC_DEADLINE_QUEUE_H_
#define MUSTER_RENDEZVOUS_SRC_DEADLINE_QUEUE_H_

#include <functional>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace muster::rendezvous {

template <typename Key>
class DeadlineQueue {
 public:
  // Arms key at deadline unless it is armed no later already. O(log n).
  void Arm(const Key& key, absl::Time deadline) {
    auto [it, fresh] = armed_.try_emplace(key, deadline);
    if (!fresh && it->second <= deadline) return;
    it->second = deadline;
    heap_.push(Entry{deadline, key});
  }

  // Forgets key (its entry in the heap goes stale). O(1).
  void Remove(const Key& key) { armed_.erase(key); }

  // Pops every key whose armed deadline is <= now, calling
  // true_deadline(key) (a std::optional<absl::Time>; nullopt: the key is gone
  // and is forgotten) for each: a key whose true deadline is still ahead is
  // re-armed there; the others are appended to *expired (and forgotten).
  // Amortised O(log n) per key that comes due.
  //
  // true_deadline runs under the caller's lock, which it may require
  // (ABSL_EXCLUSIVE_LOCKS_REQUIRED on the lambda): the analysis cannot carry
  // a caller's lock into a template, so it is not run here (nothing here
  // locks; the caller's call is checked, as the queue is guarded there).
  template <typename TrueDeadline>
  void PopExpired(absl::Time now, TrueDeadline true_deadline,
                  std::vector<Key>* expired) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    while (!heap_.empty() && heap_.top().deadline <= now) {
      const Entry top = heap_.top();
      heap_.pop();
      auto it = armed_.find(top.key);
      if (it == armed_.end() || it->second != top.deadline) continue;  // stale
      const std::optional<absl::Time> actual = true_deadline(top.key);
      if (!actual.has_value()) {
        armed_.erase(it);
      } else if (*actual > now) {
        it->second = *actual;
        heap_.push(Entry{*actual, top.key});
      } else {
        armed_.erase(it);
        expired->push_back(top.key);
      }
    }
  }

  // The earliest deadline, or absl::InfiniteFuture(). Exact when few keys
  // moved since they were armed: up to kMaxRefresh entries at the top are
  // brought to their true deadline (or forgotten) first; past that it may be
  // earlier than the truth (never later), which costs the caller an early
  // wake-up and no missed deadline. Bounded, so that 10,000 heartbeating keys
  // do not make every call re-arm them all. true_deadline: as PopExpired's
  // (hence no analysis here either).
  template <typename TrueDeadline>
  absl::Time Next(TrueDeadline true_deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    constexpr int kMaxRefresh = 16;
    for (int refreshed = 0; !heap_.empty();) {
      const Entry top = heap_.top();
      auto it = armed_.find(top.key);
      if (it == armed_.end() || it->second != top.deadline) {
        heap_.pop();  // stale
        continue;
      }
      if (refreshed++ == kMaxRefresh) return top.deadline;
      const std::optional<absl::Time> actual = true_deadline(top.key);
      if (!actual.has_value()) {
        heap_.pop();
        armed_.erase(it);
      } else if (*actual > top.deadline) {
        heap_.pop();
        it->second = *actual;
        heap_.push(Entry{*actual, top.key});
      } else {
        return top.deadline;
      }
    }
    return absl::InfiniteFuture();
  }

  size_t size() const { return armed_.size(); }

 private:
  struct Entry {
    absl::Time deadline;
    Key key;
    bool operator>(const Entry& o) const { return deadline > o.deadline; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  absl::flat_hash_map<Key, absl::Time> armed_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_DEADLINE_QUEUE_H_
