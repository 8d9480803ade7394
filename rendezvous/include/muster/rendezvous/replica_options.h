// Options of musterd's replicas on etcd (musterd --etcd-endpoints; the design
// is in rendezvous/src/replica/replica.h and docs/architecture.md,
// "Replicas on etcd").
#ifndef MUSTER_RENDEZVOUS_REPLICA_OPTIONS_H_
#define MUSTER_RENDEZVOUS_REPLICA_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace muster::rendezvous {

// How to reach etcd.
struct EtcdConnection {
  // Client URLs of the members, http://HOST:PORT or https://HOST:PORT
  // (musterd --etcd-endpoints). Empty: no replication.
  std::vector<std::string> endpoints;
  // PEM files for https:// (musterd --etcd-ca, --etcd-cert, --etcd-key):
  // the CA that signed the members' certificates (empty: the system's
  // roots), and this replica's client certificate and key (both or neither).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// The exit code of a replica that lost the leadership (its lease expired or
// was revoked, or a write was fenced): a clean process, restarted by systemd
// or Kubernetes, comes back as a standby (EX_TEMPFAIL).
inline constexpr int kDeposedExitCode = 75;

struct ReplicaOptions {
  EtcdConnection etcd;
  // Every key musterd writes is under it (musterd --etcd-prefix): the
  // election at PREFIX/leader, jobs at PREFIX/jobs/, the Store at
  // PREFIX/store/.
  std::string prefix = "/muster";
  // HOST:PORT agents and the other replicas are told for this replica
  // (musterd --advertise-addr).
  std::string advertise_addr;
  // The election lease's TTL (musterd --election-ttl). etcd grants at least
  // 1.5 of its election timeouts (2 s with its defaults). The lease matters
  // only when a leader's host vanishes whole: a dead leader process is
  // noticed by its standbys' probes (below) in about 0.1 s.
  absl::Duration election_ttl = absl::Seconds(2);
  // The leader renews its lease this often, and acts (serves a call, renews
  // an agent, decides a round) only while a renewal sent less than
  // `leadership_validity` ago was answered. A paused leader therefore stops
  // acting, by its own clock, long before its lease can expire or be
  // revoked and a new leader act (see replica.h for the argument).
  absl::Duration keepalive_interval = absl::Milliseconds(200);
  absl::Duration leadership_validity = absl::Seconds(1);
  // How long one renewal may try, member after member, before the next one
  // starts (each member gets a share, at least 150 ms: etcd_client.h).
  absl::Duration renewal_timeout = absl::Milliseconds(400);
  // A leader that has had no renewal answered for this long gives up
  // (exit(kDeposedExitCode)); at least twice the granted TTL. Renewals that
  // time out depose nobody before: etcd extends every lease when it
  // promotes a new leader of its own, so its failover (1-3 s on a loaded
  // machine, docs/performance.md "etcd's leader killed") cannot end a lease,
  // and meanwhile the unconfirmed leader acts on nothing (replica.h). A
  // leader cut off from etcd is replaced after its TTL all the same; this
  // only bounds how long it lingers, gate shut, before it exits.
  absl::Duration give_up_after = absl::Seconds(10);
  // A standby probes the leader's --advertise-addr this often. When it
  // answered before and now refuses the connection (its process is gone:
  // kill -9, a crash), the standby revokes the leader's lease instead of
  // waiting for it to expire. A leader that is silent but whose port still
  // accepts (SIGSTOP, a hung process) is left to its lease. Either way the
  // next leader waits leadership_validity plus a margin after it wins
  // before it acts, by which time the old one has stopped acting even if it
  // still runs.
  absl::Duration probe_interval = absl::Milliseconds(100);
  // Store namespaces of jobs loaded from etcd by a new leader are dropped
  // when no agent brought their job back within this (the Coordinator's
  // adoption grace is 5 s).
  absl::Duration forget_unclaimed_after = absl::Seconds(10);
  // Called once when this replica stops being the leader for good (after it
  // stopped serving). Default (unset): log and exit(kDeposedExitCode).
  std::function<void(const absl::Status& why)> on_deposed;

  bool enabled() const { return !etcd.endpoints.empty(); }
};

// One etcd member as a replica sees it (the console's cluster page,
// /api/v1/cluster): whether it answered etcd's Maintenance.Status in time,
// and what it said.
struct EtcdMemberHealth {
  std::string endpoint;  // as given in --etcd-endpoints
  bool healthy = false;
  std::string error;  // why not, when not
  std::string version;
  bool leader = false;  // etcd's own Raft leader
  int64_t db_size_bytes = 0;
  int64_t raft_term = 0;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_REPLICA_OPTIONS_H_
