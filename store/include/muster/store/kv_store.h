// KvStore: the key-value semantics of the Store, shared by musterd's Store
// service (where waits must not hold a thread: tens of thousands of ranks may
// wait at once) and InMemoryStore.
//
// Data lives in namespaces (a round's store prefix, "<job>/<round>"). Dropping
// a namespace fails its waiters with ABORTED, so a rank of a dead round never
// reads a key of the next one.
//
// Thread-safe. Callbacks run outside the lock, on the thread that made them
// ready (a Set, a CancelWait, a Drop), or on the calling thread when WaitFor
// finds the keys at once.
#ifndef MUSTER_STORE_KV_STORE_H_
#define MUSTER_STORE_KV_STORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace muster::store {

// Limits that keep one job from exhausting musterd's memory (a shared server:
// one runaway worker must not take every other job down with it). A write that
// would pass one fails with RESOURCE_EXHAUSTED naming the limit, its value,
// the musterd flag that sets it, and nothing is written.
struct KvStoreLimits {
  // The longest key (bytes).
  int64_t max_key_bytes = 4 << 10;
  // The largest value (bytes). gRPC's own default message limit is 4 MB.
  int64_t max_value_bytes = 4 << 20;
  // Per namespace (a job's round): keys and bytes of keys plus values.
  int64_t max_namespace_keys = 1 << 20;
  int64_t max_namespace_bytes = int64_t{256} << 20;
};

class KvStore {
 public:
  // Receives the values of the waited keys (in order), or why the wait ended
  // without them.
  using WaitCallback =
      absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>)>;
  using WaiterId = uint64_t;

  explicit KvStore(KvStoreLimits limits = {}) : limits_(limits) {}
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // Every operation on a namespace closed by DropNamespace fails with ABORTED
  // (checked before anything else the operation might answer).
  //
  // RESOURCE_EXHAUSTED past a limit (KvStoreLimits).
  absl::Status Set(absl::string_view ns, absl::string_view key,
                   absl::string_view value);
  // NOT_FOUND when absent.
  absl::StatusOr<std::string> Get(absl::string_view ns,
                                  absl::string_view key) const;
  // INVALID_ARGUMENT when the stored value is not a decimal integer;
  // RESOURCE_EXHAUSTED past a limit.
  absl::StatusOr<int64_t> Add(absl::string_view ns, absl::string_view key,
                              int64_t delta);
  // The value after the call; RESOURCE_EXHAUSTED past a limit.
  absl::StatusOr<std::string> CompareSet(absl::string_view ns,
                                         absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired);
  // INVALID_ARGUMENT when sizes differ, RESOURCE_EXHAUSTED past a limit;
  // nothing is written then.
  absl::Status MultiSet(absl::string_view ns,
                        absl::Span<const std::string> keys,
                        absl::Span<const std::string> values);
  // Whether the key existed.
  absl::StatusOr<bool> Delete(absl::string_view ns, absl::string_view key);
  // How many keys ns holds; ABORTED when it was dropped.
  absl::StatusOr<int64_t> CountKeys(absl::string_view ns) const;
  // As CountKeys, but 0 for a dropped namespace (metrics, tests). The Store
  // services answer with CountKeys, so a worker of an ended round is told.
  int64_t NumKeys(absl::string_view ns) const;
  // The keys of ns and their bytes (keys plus values, as the limits count
  // them); zeros for a namespace that holds nothing or was dropped.
  struct Usage {
    int64_t keys = 0;
    int64_t bytes = 0;
  };
  Usage NamespaceUsage(absl::string_view ns) const;
  const KvStoreLimits& limits() const { return limits_; }

  // Replication (musterd --etcd-endpoints): while a Committer is set, the
  // async writes below commit through it before they apply, and dropped
  // namespaces are dropped there too, and recorded as closed, so that the
  // next leader refuses them as this one does (it loads the records with
  // DropNamespace before it sets its Committer). Implemented by the
  // replica's etcd pipeline (rendezvous/src/replica/).
  class Committer {
   public:
    virtual ~Committer() = default;
    // One key of a namespace, written or (erase) deleted.
    struct Write {
      std::string ns;
      std::string key;
      bool erase = false;
      std::string value;
    };
    // Commits `writes` after every batch submitted before (in submission
    // order) and calls `done` once, in the same order as the batches were
    // submitted, on any thread. Must not block or call back into the store
    // before returning.
    virtual void Commit(std::vector<Write> writes,
                        absl::AnyInvocable<void(absl::Status)> done) = 0;
    // Deletes every key of namespace `ns` and records, in the same step,
    // that it is closed (its name holds the job and the round); `forget`,
    // when not empty, is an older namespace whose record goes in that step
    // (the records are bounded as the store's own list is:
    // kMaxClosedNamespaces). After every earlier batch. Never blocks.
    virtual void CommitClose(std::string ns, std::string forget) = 0;
    // Deletes every key and every closed record of every namespace whose
    // name starts with `ns_prefix` (a job forgotten: "<job>/"), after every
    // earlier batch. Never blocks.
    virtual void CommitDrop(std::string ns_prefix) = 0;
  };
  // Before serving; `committer` outlives the store or is unset (nullptr)
  // first. The synchronous writes above bypass it (for loading a replica's
  // state, and for one process).
  void SetCommitter(Committer* committer);

  // The write path of musterd's Store service. Each applies the write as the
  // synchronous call above does and calls `done` with its result: before
  // returning without a Committer; with one, once the Committer committed the
  // write (musterd --etcd-endpoints: etcd), on the committing thread. Readers
  // (Get, WaitFor) see a write only once it is committed, so no write that was
  // acknowledged or read is lost with a leader; writes on the same key see
  // each other at once (an Add counts from the Add before it, committed or
  // not). `done` runs outside the store's lock, may run on any thread, and
  // must not block.
  //
  // A write made before its namespace was dropped and still in flight then
  // is answered with its commit's status: it committed before the drop (the
  // Committer keeps their order), so it took effect before the drop on every
  // replica, and if the drop itself never reaches etcd (the leader lost
  // first) the next leader holds it. It is not applied here: nothing reads a
  // dropped namespace. Every call made after the drop fails with ABORTED.
  using StatusCallback = absl::AnyInvocable<void(absl::Status)>;
  using Int64Callback = absl::AnyInvocable<void(absl::StatusOr<int64_t>)>;
  using StringCallback = absl::AnyInvocable<void(absl::StatusOr<std::string>)>;
  using BoolCallback = absl::AnyInvocable<void(absl::StatusOr<bool>)>;
  void SetAsync(absl::string_view ns, absl::string_view key,
                absl::string_view value, StatusCallback done);
  void AddAsync(absl::string_view ns, absl::string_view key, int64_t delta,
                Int64Callback done);
  void CompareSetAsync(absl::string_view ns, absl::string_view key,
                       absl::string_view expected, absl::string_view desired,
                       StringCallback done);
  void MultiSetAsync(absl::string_view ns, absl::Span<const std::string> keys,
                     absl::Span<const std::string> values, StatusCallback done);
  void DeleteAsync(absl::string_view ns, absl::string_view key,
                   BoolCallback done);

  // Calls `done` with the values once every key exists in ns. When they exist
  // already, calls it before returning and returns 0; otherwise returns an id
  // for CancelWait. Never blocks.
  WaiterId WaitFor(absl::string_view ns, std::vector<std::string> keys,
                   WaitCallback done);

  // Ends a pending wait with `why` (a deadline, a cancelled RPC). No effect
  // when it already ended. The status message gets the names of the keys still
  // missing.
  void CancelWait(WaiterId id, const absl::Status& why);

  // Removes a namespace (a round's, when the round ends) and fails its
  // waiters with ABORTED. The namespace stays closed: a later op on it fails
  // with ABORTED too, so that a worker still on the ended round cannot bring
  // it back with a write and then wait there for peers that are gone. Closed
  // until DropNamespacesWithPrefix forgets its job (the newest
  // kMaxClosedNamespaces are remembered; with a Committer, in etcd too).
  void DropNamespace(absl::string_view ns);
  // Removes every namespace whose name starts with prefix (a job's rounds:
  // "<job>/"), and forgets that those were closed (a job run again under the
  // same name starts its rounds afresh).
  void DropNamespacesWithPrefix(absl::string_view prefix);
  static constexpr size_t kMaxClosedNamespaces = 65536;

  // For musterd --state-dir (rendezvous/src/server/state_journal.h): a counter
  // that changes with every write, delete and drop, and a copy of every
  // namespace.
  uint64_t Version() const { return version_.load(std::memory_order_relaxed); }
  std::map<std::string, std::map<std::string, std::string>> Snapshot() const;

  // Counters for metrics.
  int64_t NamespaceCount() const;
  int64_t PendingWaiters() const;

 private:
  struct Waiter {
    std::string ns;
    std::vector<std::string> keys;
    WaitCallback done;
  };
  struct Namespace {
    absl::flat_hash_map<std::string, std::string> entries;
    int64_t bytes = 0;  // Of keys and values.
  };

  // Whether writing `value` at `key` (replacing what is there) fits the
  // limits; `added_keys`/`added_bytes` accumulate over a batch.
  absl::Status CheckWriteLocked(absl::string_view ns, const Namespace* n,
                                absl::string_view key, absl::string_view value,
                                int64_t* added_keys, int64_t* added_bytes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ABORTED when ns was closed by DropNamespace.
  absl::Status CheckOpenLocked(absl::string_view ns) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes and accounts.
  void PutLocked(Namespace& n, absl::string_view key, std::string value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Moves waiters of ns whose keys all exist into `ready`, with their values.
  void CollectReadyLocked(
      const std::string& ns,
      std::vector<std::pair<WaitCallback, std::vector<std::string>>>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailWaitersLocked(const std::string& ns,
                         std::vector<WaitCallback>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The replicated path (Committer): the value a key will have once the
  // writes submitted for it commit (nullopt: deleted), how many are in
  // flight, and the namespace's drop generation when they were submitted
  // (a write whose namespace was dropped meanwhile is not applied).
  struct Pending {
    std::optional<std::string> value;
    int count = 0;
  };
  static std::string PendingKey(absl::string_view ns, absl::string_view key) {
    return absl::StrCat(ns, absl::string_view("\0", 1), key);
  }
  // The key's value as the next write sees it: pending, else committed.
  const std::string* ViewLocked(absl::string_view ns,
                                absl::string_view key) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Records `writes` as pending and hands them to the committer (under the
  // lock, so batches reach it in the order their values were computed);
  // `done` gets the commit's status after they applied.
  void SubmitLocked(std::vector<Committer::Write> writes,
                    absl::AnyInvocable<void(absl::Status)> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops ns (its waiters go to *failed, to be failed outside the lock).
  void DropNamespaceLocked(
      const std::string& ns,
      std::vector<std::pair<std::string, WaitCallback>>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void FailDropped(
      std::vector<std::pair<std::string, WaitCallback>>& failed);
  void ApplyCommitted(const std::vector<Committer::Write>& writes,
                      const std::vector<uint64_t>& generations,
                      const absl::Status& status);

  const KvStoreLimits limits_;
  mutable absl::Mutex mu_;
  Committer* committer_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Namespaces with writes in flight: their count and drop generation.
  struct PendingNamespace {
    int count = 0;
    uint64_t generation = 0;
  };
  absl::flat_hash_map<std::string, PendingNamespace> pending_ns_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Namespace> data_ ABSL_GUARDED_BY(mu_);
  // Closed namespaces (DropNamespace), oldest first in closed_order_.
  // Returns the namespace that fell off the list, if one did.
  std::string CloseLocked(absl::string_view ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_set<std::string> closed_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> closed_order_ ABSL_GUARDED_BY(mu_);
  std::map<WaiterId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  WaiterId next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::atomic<uint64_t> version_{0};
};

}  // namespace muster::store

#endif  // MUSTER_STORE_KV_STORE_H_
