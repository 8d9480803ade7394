// Replica: one musterd of several over etcd (musterd --etcd-endpoints). The
// replicas elect one leader; only it serves Sessions and the Store; the
// others stand by, refusing calls with the leader's address, and watch it.
//
// clang-format off
//
//   kStarting ── lease granted ──► kCampaigning ── won PREFIX/leader ──► kWaiting
//                                     │    ▲                                │
//                     another leads:  │    │ the leader's key is gone       │ leadership_validity
//                     refuse, naming  ▼    │ (expired, or revoked by us:    │ + margin passed
//                     it; probe it  kStandby  its process is gone, or it    ▼
//                                           stopped answering)            kLeading
//                                                                           │
//          a renewal answered "no such lease", a write fenced, or no        │
//          renewal answered for give_up_after: stop serving, exit(75) ◄─────┘
//                                                                       kDeposed
// clang-format on
//
// Why it is safe (docs/architecture.md, "Replicas on etcd"):
//   - Writes: every etcd transaction of a leader is guarded by its election
//     key's create_revision; the key lives on the leader's lease. A leader
//     whose lease is gone, or who lost the election, writes nothing.
//   - Acts: a leader serves a call, renews an agent or decides a round only
//     while a renewal of its lease *sent* less than leadership_validity ago
//     was answered (LeaderGate::SetValidUntil; the steady clock, which runs
//     on while the process is stopped). Its lease cannot have ended before
//     that renewal was sent plus the TTL, and TTL > validity.
//   - Successors: a new leader waits leadership_validity plus a margin after
//     it wins before it acts. The old leader's lease was gone (expired or
//     revoked) before the new one could win, so no renewal of the old one
//     can succeed after that moment, and the old one stops acting at most
//     leadership_validity later — before the new one starts. A paused
//     (SIGSTOP, a frozen VM) leader that resumes finds its validity over by
//     its own clock before it does anything, then its lease gone, and exits.
//   - Renewals that time out depose nobody: etcd extends every lease by its
//     election timeout when it promotes a new leader of its own, so a lease
//     does not expire because etcd changed leader, and a renewal that cannot
//     reach etcd says nothing about the lease. Until one is answered the gate
//     stays shut (nothing is acted on, docs/architecture.md "Fencing"); only
//     "no such lease", a fenced write, or a silence of give_up_after (well
//     beyond etcd's own failover) depose.
//   - Closed Store namespaces (a round ended) are recorded at
//     PREFIX/closed/<job>/<round> in the same transaction that deletes their
//     keys, and a new leader loads them before it serves: it refuses them
//     as the leader that closed them did.
//   - A deposed leader exits (kDeposedExitCode) rather than turn standby: its
//     Coordinator and Store hold a past it must not act on; a clean process,
//     restarted by systemd or Kubernetes, stands by and loads the present from
//     etcd if it wins again (as Kubernetes' own controllers do).
//
// Thread-safe. Two threads: the election (campaign, standby probe, lease
// renewals) and the EtcdCommitter's.
#ifndef MUSTER_RENDEZVOUS_SRC_REPLICA_REPLICA_H_
#define MUSTER_RENDEZVOUS_SRC_REPLICA_REPLICA_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/rendezvous/replica_options.h"
#include "muster/store/kv_store.h"
#include "rendezvous/src/replica/etcd_client.h"
#include "rendezvous/src/replica/etcd_committer.h"
#include "rendezvous/src/service/leader_gate.h"

namespace muster::rendezvous {

class Replica {
 public:
  enum class State {
    kStarting,
    kCampaigning,
    kStandby,
    kWaiting,
    kLeading,
    kDeposed,
    kStopped
  };
  static const char* StateName(State state);

  // What the replica drives: the server's store, coordinator, token bindings
  // and gate (all outlive the replica). `stand_by` is called with the
  // leader's address (maybe empty) when this replica stands by; it must make
  // the server refuse and end its open calls (RendezvousServer::StandBy).
  struct Server {
    store::KvStore* store;
    Coordinator* coordinator;
    JobAuthRegistry* auth;
    LeaderGate* gate;
    std::function<void(const std::string& leader)> stand_by;
  };

  // Validates the options and connects lazily; the election starts at once
  // on a thread of its own and the server refuses calls until this replica
  // leads. Errors: INVALID_ARGUMENT naming the flag (--etcd-endpoints,
  // --etcd-ca/-cert/-key, --etcd-prefix, --advertise-addr, --election-ttl).
  static absl::StatusOr<std::unique_ptr<Replica>> Start(ReplicaOptions options,
                                                        Server server);
  // Stop().
  ~Replica();

  // Gives up: a leader revokes its lease (so a standby leads at once, without
  // waiting for it to expire) after failing its pending writes. Idempotent;
  // blocks up to about a second.
  void Stop();

  // From the server's tick thread: while leading, mirrors the job table into
  // etcd (PREFIX/jobs/<job>) when it changed, at most every 50 ms, and drops
  // the Store namespaces of jobs loaded from etcd that no agent brought back
  // within twice the adoption grace.
  void Tick(absl::Time now);

  State state() const;
  // The leader's address as last seen (this replica's own when it leads).
  std::string leader() const;
  // Writes committed to etcd so far (tests, the benchmark).
  int64_t committed_writes() const;
  // Every etcd member's health (EtcdClient::MemberHealth), asked at most
  // every 2 s: the console polls once a second per open page. Blocks up to
  // half a second per member when it asks. Thread-safe.
  std::vector<EtcdMemberHealth> EtcdHealth();

 private:
  Replica(ReplicaOptions options, Server server,
          std::unique_ptr<EtcdClient> etcd);

  void Run();
  // One campaign: returns true when this replica won (and now leads or was
  // deposed), false to campaign again.
  bool Campaign();
  // Stands by while `leader` (its key's value, lease and revision) leads;
  // returns when the key is gone or changed.
  void StandBy(const std::string& leader, int64_t leader_lease);
  // Loads the Store and the jobs from etcd and starts serving.
  absl::Status TakeOver();
  // Renews the lease every keepalive_interval until deposed or stopped;
  // starts serving `wait` after it was called.
  void Lead(absl::Duration wait);
  // Stops serving for good and calls on_deposed (once).
  void Depose(const absl::Status& why);
  void SetState(State state);
  // Sleeps up to `d`, returning early (true) when stopping.
  bool SleepUnlessStopping(absl::Duration d);

  std::string LeaderKey() const { return options_.prefix + "/leader"; }
  std::string JobsPrefix() const { return options_.prefix + "/jobs/"; }
  std::string StorePrefix() const { return options_.prefix + "/store/"; }
  std::string ClosedPrefix() const { return options_.prefix + "/closed/"; }
  // How long without an answer from etcd (renewals, commits) before this
  // leader gives up: give_up_after, at least two granted TTLs.
  absl::Duration GiveUpAfter() const;
  // Calls `each` with every key-value under `prefix` at `*revision` (0: the
  // newest, then set to it), page by page. Errors: UNAVAILABLE naming what.
  absl::Status LoadRange(const std::string& prefix, absl::string_view what,
                         int64_t* revision,
                         absl::FunctionRef<void(const mvccpb::KeyValue&)> each);
  // The lease id a standby revoked last (see StandBy).
  std::string RevokedKey() const { return options_.prefix + "/revoked"; }

  const ReplicaOptions options_;
  const Server server_;
  const std::unique_ptr<EtcdClient> etcd_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kStarting;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool deposed_ ABSL_GUARDED_BY(mu_) = false;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lease_ttl_seconds_ = 0;  // election thread only
  int64_t leader_revision_ = 0;    // election thread only
  int64_t last_leader_lease_ = 0;  // election thread only: the last leader
  std::unique_ptr<EtcdCommitter> committer_;  // set once, before serving

  // Tick thread only: the job records last written, and the jobs loaded
  // from etcd with the time their Store namespaces are dropped unless an
  // agent brought the job back.
  absl::Time last_mirror_ = absl::InfinitePast();
  std::map<std::string, std::string> mirrored_jobs_;
  std::map<std::string, absl::Time> loaded_jobs_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> mirror_ready_{false};

  absl::Mutex health_mu_;
  absl::Time health_at_ ABSL_GUARDED_BY(health_mu_) = absl::InfinitePast();
  std::vector<EtcdMemberHealth> health_ ABSL_GUARDED_BY(health_mu_);

  std::thread thread_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_REPLICA_REPLICA_H_
