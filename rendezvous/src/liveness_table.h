// LivenessTable: when each connection was last heard from, kept apart from the
// Coordinator's lock.
//
// A heartbeat is most of the events (10,000 agents at the default 250 ms send
// 40,000 a second) and only moves a time later. Under the Coordinator's lock,
// even shared, every heartbeat waited whenever the lock was held exclusively
// (a round of 10,000 forming, a Tick), and gRPC has only a few threads to
// deliver them: one slow event stalled every stream. Here a heartbeat takes a
// shard's reader lock, finds its entry and stores the time with a relaxed
// atomic write: no allocation, no write to shared state but its own entry.
//
// Thread-safe. Entries are added and removed by the Coordinator under its own
// lock (Set, Erase); Touch and Get may run concurrently with anything.
#ifndef MUSTER_RENDEZVOUS_SRC_LIVENESS_TABLE_H_
#define MUSTER_RENDEZVOUS_SRC_LIVENESS_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace muster::rendezvous {

// A time written and read with relaxed atomics (only the value matters).
// Copyable so that it can live in a flat hash map, which moves entries only
// under its shard's exclusive lock.
class AtomicTime {
 public:
  AtomicTime() = default;
  AtomicTime(const AtomicTime& o)
      : ns_(o.ns_.load(std::memory_order_relaxed)) {}
  AtomicTime& operator=(const AtomicTime& o) {
    ns_.store(o.ns_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  AtomicTime& operator=(absl::Time t) {
    ns_.store(absl::ToUnixNanos(t), std::memory_order_relaxed);
    return *this;
  }
  absl::Time Get() const {
    return absl::FromUnixNanos(ns_.load(std::memory_order_relaxed));
  }

 private:
  std::atomic<int64_t> ns_{0};
};

template <typename Key>
class LivenessTable {
 public:
  // Adds key (or moves its time) at t.
  void Set(const Key& key, absl::Time t) {
    Shard& s = ShardOf(key);
    absl::MutexLock lock(&s.mu);
    s.last_seen[key] = t;
  }

  // Moves key's time to t when key is present (it is not added). Returns
  // whether it was present. Never waits for Set or Erase of another shard.
  bool Touch(const Key& key, absl::Time t) {
    Shard& s = ShardOf(key);
    absl::ReaderMutexLock lock(&s.mu);
    auto it = s.last_seen.find(key);
    if (it == s.last_seen.end()) return false;
    it->second = t;
    return true;
  }

  // key's time, or nullopt when it is absent.
  std::optional<absl::Time> Get(const Key& key) const {
    const Shard& s = ShardOf(key);
    absl::ReaderMutexLock lock(&s.mu);
    auto it = s.last_seen.find(key);
    if (it == s.last_seen.end()) return std::nullopt;
    return it->second.Get();
  }

  void Erase(const Key& key) {
    Shard& s = ShardOf(key);
    absl::MutexLock lock(&s.mu);
    s.last_seen.erase(key);
  }

 private:
  // Enough that the few gRPC threads delivering heartbeats rarely meet a
  // Set or Erase on the same shard.
  static constexpr int kShards = 16;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<Key, AtomicTime> last_seen ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(const Key& key) {
    return shards_[static_cast<uint64_t>(key) % kShards];
  }
  const Shard& ShardOf(const Key& key) const {
    return shards_[static_cast<uint64_t>(key) % kShards];
  }
  std::array<Shard, kShards> shards_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_LIVENESS_TABLE_H_
