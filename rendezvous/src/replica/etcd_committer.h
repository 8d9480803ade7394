// EtcdCommitter: the leader's write pipeline into etcd. Store writes
// (KvStore::Committer), namespace drops with their closed records, and the
// job table's records queue
// here and go to etcd in group commits: while one transaction is in flight,
// the writes that arrive gather, and the next transaction carries them all
// (within etcd's default limits: 128 operations and 1 MiB a request). A
// Store write is acknowledged only after its transaction committed, so
// 1,000 clients cost a few transactions per etcd commit, not 1,000.
//
// Fencing: every transaction is guarded by the election, `create_revision(
// PREFIX/leader) == the revision this replica won it at`. The leader key is
// attached to the leader's lease, so once that lease is gone (expired,
// revoked) or another replica won, no write of this one lands. A transaction
// that fails its guard, or cannot reach etcd within `commit_timeout`, fails
// every write queued and calls on_failure once: the replica gives up its
// leadership (replica.h).
//
// Every write handed over is answered, even after Stop: what comes later is
// failed with UNAVAILABLE by the committer's thread (never on the caller's,
// which holds the store's lock), until the destructor.
//
// Thread-safe. One thread of its own.
#ifndef MUSTER_RENDEZVOUS_SRC_REPLICA_ETCD_COMMITTER_H_
#define MUSTER_RENDEZVOUS_SRC_REPLICA_ETCD_COMMITTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/store/kv_store.h"
#include "rendezvous/src/replica/etcd_client.h"

namespace muster::rendezvous {

struct EtcdCommitterOptions {
  // PREFIX/leader and the create_revision this replica holds it at.
  std::string leader_key;
  int64_t leader_revision = 0;
  // Store keys live at store_prefix + ns + "/" + key.
  std::string store_prefix;
  // A closed namespace is recorded at closed_prefix + ns ("<job>/<round>"),
  // its value the time of the drop (for a person); empty: not recorded.
  std::string closed_prefix;
  // etcd's default --max-txn-ops and (under) --max-request-bytes.
  int max_ops = 128;
  int64_t max_bytes = 1 << 20;
  // How long one transaction may try before the leader gives up: tried
  // again, every member in turn, `attempt_timeout` at a time, while etcd
  // cannot answer (its own leader election takes 1-2.5 s on a loaded
  // machine; a transaction guarded by the leader's key is safe to repeat).
  // The replica sets its give_up_after: a timeout alone deposes no sooner
  // than missing renewals do.
  absl::Duration commit_timeout = absl::Seconds(10);
  absl::Duration attempt_timeout = absl::Seconds(2);
  // Called once, on the committer's thread, when a transaction failed.
  std::function<void(const absl::Status&)> on_failure;
};

class EtcdCommitter final : public store::KvStore::Committer {
 public:
  // `etcd` outlives the committer. Starts the thread.
  EtcdCommitter(EtcdClient* etcd, EtcdCommitterOptions options);
  // Stop(), then answers whatever is still queued and joins the thread.
  ~EtcdCommitter() override;

  // KvStore::Committer.
  void Commit(std::vector<Write> writes,
              absl::AnyInvocable<void(absl::Status)> done) override;
  void CommitClose(std::string ns, std::string forget) override;
  void CommitDrop(std::string ns_prefix) override;

  // A raw etcd key (the job table), written or deleted in order with the rest;
  // no acknowledgement (a failure deposes the leader).
  void CommitKey(std::string key, std::string value, bool erase);

  // From now on nothing more is sent: what is queued, and what comes later,
  // fails with UNAVAILABLE (on the committer's thread). Waits for the
  // transaction in flight, if any, to end (up to attempt_timeout, then it
  // is not tried again).
  // Idempotent.
  void Stop();

  // Counters for tests and the benchmark.
  int64_t transactions() const;
  int64_t writes() const;

 private:
  struct Item {
    // kAlone: `ops`, in a transaction of their own (a namespace closed or
    // dropped: a range delete overlaps the puts around it, which etcd
    // refuses in one transaction).
    enum class Kind { kPut, kDelete, kAlone, kBarrier } kind;
    std::string key;                           // etcd key (kPut, kDelete)
    std::string value;                         // kPut
    std::vector<etcdserverpb::RequestOp> ops;  // kAlone
    // Called once the item's transaction committed or failed. A KvStore
    // batch's callback rides on its last item.
    std::vector<absl::AnyInvocable<void(absl::Status)>> done;
  };
  // One transaction: its operations, and every callback of the items taken
  // into it in the order they were queued (writes of one key merge into one
  // operation, but their callbacks keep their order: KvStore applies in it).
  struct Batch {
    std::vector<Item> items;
    std::vector<absl::AnyInvocable<void(absl::Status)>> done;
  };

  void Loop();
  // Takes the next transaction's items from queue_ (at least one).
  Batch TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Send(const std::vector<Item>& items);
  static void Fail(Batch& batch, const absl::Status& why);

  EtcdClient* const etcd_;
  const EtcdCommitterOptions options_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Stop: send nothing more
  bool exiting_ ABSL_GUARDED_BY(mu_) = false;   // the destructor
  bool sending_ ABSL_GUARDED_BY(mu_) = false;   // a transaction in flight
  absl::Status failed_ ABSL_GUARDED_BY(mu_);    // non-OK once a commit failed
  int64_t transactions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_REPLICA_ETCD_COMMITTER_H_
