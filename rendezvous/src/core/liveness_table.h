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
// lock (Set, Erase); Touch and Get may run concurrently with anything. The
// same sharded table (ShardedTable) holds each stream's lease state
// (rendezvous/src/core/lease.h).
#ifndef MUSTER_RENDEZVOUS_SRC_LIVENESS_TABLE_H_
#define MUSTER_RENDEZVOUS_SRC_LIVENESS_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

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

// A relaxed atomic value (a count, a flag) that can live in a flat hash map,
// like AtomicTime.
template <typename T>
class RelaxedAtomic {
 public:
  RelaxedAtomic() = default;
  RelaxedAtomic(const RelaxedAtomic& o)
      : v_(o.v_.load(std::memory_order_relaxed)) {}
  RelaxedAtomic& operator=(const RelaxedAtomic& o) {
    v_.store(o.v_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  RelaxedAtomic& operator=(T v) {
    v_.store(v, std::memory_order_relaxed);
    return *this;
  }
  T Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<T> v_{};
};

// Entries (copyable, their fields atomics) by key, in shards: Set and Erase
// take a shard's exclusive lock, Visit its reader lock, so that entries are
// read and written in place concurrently with anything.
template <typename Key, typename Entry>
class ShardedTable {
 public:
  // Adds key's entry, or replaces it.
  void Set(const Key& key, const Entry& entry) {
    Shard& s = ShardOf(key);
    absl::MutexLock lock(&s.mu);
    s.entries[key] = entry;
  }

  // Calls f(entry) when key is present and returns what it returned (nullopt
  // when absent). f runs under the shard's reader lock: it may only touch
  // the entry's atomics. Never waits for Set or Erase of another shard.
  template <typename F>
  auto Visit(const Key& key, F f)
      -> std::optional<decltype(f(std::declval<Entry&>()))> {
    Shard& s = ShardOf(key);
    absl::ReaderMutexLock lock(&s.mu);
    auto it = s.entries.find(key);
    if (it == s.entries.end()) return std::nullopt;
    return f(it->second);
  }

  void Erase(const Key& key) {
    Shard& s = ShardOf(key);
    absl::MutexLock lock(&s.mu);
    s.entries.erase(key);
  }

 private:
  // Enough that the few gRPC threads delivering heartbeats rarely meet a
  // Set or Erase on the same shard.
  static constexpr int kShards = 16;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<Key, Entry> entries ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(const Key& key) {
    return shards_[static_cast<uint64_t>(key) % kShards];
  }
  std::array<Shard, kShards> shards_;
};

template <typename Key>
class LivenessTable {
 public:
  // Adds key (or moves its time) at t.
  void Set(const Key& key, absl::Time t) {
    AtomicTime v;
    v = t;
    table_.Set(key, v);
  }

  // Moves key's time to t when key is present (it is not added). Returns
  // whether it was present. Never waits for Set or Erase of another shard.
  bool Touch(const Key& key, absl::Time t) {
    return table_
        .Visit(key,
               [t](AtomicTime& v) {
                 v = t;
                 return true;
               })
        .has_value();
  }

  // key's time, or nullopt when it is absent.
  std::optional<absl::Time> Get(const Key& key) const {
    return table_.Visit(key, [](AtomicTime& v) { return v.Get(); });
  }

  void Erase(const Key& key) { table_.Erase(key); }

 private:
  // Visit only reads through a const Get.
  mutable ShardedTable<Key, AtomicTime> table_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_LIVENESS_TABLE_H_
