// RendezvousServer: musterd's gRPC server (the Rendezvous Session stream, the
// Store service and grpc.health.v1) over a Coordinator and a KvStore. Used by
// musterd and embedded by the agent in
// --standalone, static and is_host modes.
//
// No thread per stream or per waiting Store call: Session streams run on
// gRPC's async API over a few completion queues (a thread each), the rest on
// its callback API.
#ifndef MUSTER_RENDEZVOUS_SERVER_H_
#define MUSTER_RENDEZVOUS_SERVER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/rendezvous/replica_options.h"
#include "muster/store/kv_store.h"
#include "muster/store/security.h"

namespace muster::rendezvous {

struct ServerOptions {
  // HOST:PORT to listen on; port 0 picks a free one (see
  // RendezvousServer::port()).
  std::string listen = "0.0.0.0:29400";
  CoordinatorOptions coordinator;
  // HOST:PORT for the HTTP probes and metrics (/healthz, /readyz, /metrics in
  // Prometheus text) and the console, or empty for none; port 0 picks one (see
  // http_port()). HTTPS with tls's certificate when tls is enabled.
  std::string http_listen;
  // How often the Coordinator's timers are checked; bounds the lateness of
  // heartbeat detection.
  absl::Duration tick_interval = absl::Milliseconds(20);
  // Key and value sizes and each job round's quota in the Store.
  store::KvStoreLimits store_limits;
  // TLS on the gRPC port (musterd --tls-cert, --tls-key, --tls-client-ca);
  // plaintext when empty. See docs/security.md.
  store::ServerTls tls = {};
  // Refuse jobs without a token (musterd --require-token).
  bool require_token = false;
  // The admin token (musterd --admin-token-file): sees every job's status.
  // Empty: none. Never logged.
  std::string admin_token = {};
  // musterd --metrics-admin-only: /metrics (which names every job) answers
  // only with the admin token as a bearer token, 401 otherwise. Needs
  // admin_token.
  bool metrics_admin_only = false;
  // musterd --state-dir: journal jobs, rounds and Store keys there, and
  // resume them on start (rendezvous/src/server/state_journal.h). Empty: none.
  std::string state_dir = {};
  // How many completion queues (each drained by a thread of its own) carry
  // the Session streams; 0: the default (one per core, 2 to 16). More queues
  // make each gRPC completion cheaper with many agents (Debian's gRPC checks
  // each one against every operation pending on its queue), fewer save
  // wake-ups of their threads.
  int session_queues = 0;
  // musterd --etcd-endpoints and friends: one of several replicas over etcd
  // (rendezvous/src/replica/replica.h); off when replica.etcd.endpoints is
  // empty. An empty advertise_addr becomes the listen host (this host's name
  // for 0.0.0.0) and the bound port. Store values are capped at 1 MiB then
  // (etcd's requests are at most 1.5 MiB).
  ReplicaOptions replica = {};
};

// Thread-safe.
class RendezvousServer {
 public:
  // Binds and starts serving before it returns. Errors: INVALID_ARGUMENT for a
  // malformed listen address; UNAVAILABLE when the port cannot be bound, naming
  // the address and, when it can tell, the process that holds the port
  // ("address already in use by pid 123 (musterd ...)"). SO_REUSEPORT is off: a
  // second server on a taken port fails instead of sharing it.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(
      ServerOptions options);

  // Shuts down (as Shutdown with the default grace) if still serving.
  ~RendezvousServer();

  // The bound port.
  int port() const;
  // HOST:PORT actually bound.
  std::string address() const;
  // The bound HTTP port, or 0 without http_listen.
  int http_port() const;

  // Re-reads the TLS certificate, key and client CA (musterd's SIGHUP). New
  // connections use them within a second; open sessions and jobs go on.
  // Errors: FAILED_PRECONDITION without TLS; INVALID_ARGUMENT naming a file
  // that is missing, not PEM, expired or not the key of the certificate (the
  // old certificates stay in use).
  absl::Status ReloadTls();

  // Marks health NOT_SERVING (and /readyz 503), ends every Session stream with
  // UNAVAILABLE
  // ("musterd is shutting down"), fails pending Store waits, and stops within
  // `grace`. Idempotent; blocks until done.
  void Shutdown(absl::Duration grace = absl::Seconds(2));

  // Blocks until Shutdown has finished (from another thread).
  void Wait();

  // Replicas (musterd --etcd-endpoints, rendezvous/src/replica/). StandBy:
  // every Session Join, Store call and GetStatus is refused with UNAVAILABLE
  // naming the leader (`self` and `leader` are HOST:PORT; the leader also in
  // the trailing metadata `muster-leader`, empty when unknown), the open
  // streams and calls end so, and /readyz answers 503. Lead: serve again.
  // A server serves from the start. Thread-safe; do not block.
  void StandBy(const std::string& self, const std::string& leader);
  // `epoch`: the leadership's fencing token (its etcd election revision; 0
  // for a single musterd), carried by every message and Store answer from now
  // on (docs/architecture.md, "Fencing").
  void Lead(int64_t epoch = 0);
  bool leading() const;
  // A leader acts only until `until` (steady clock) unless confirmed again
  // (the replica's etcd renewals call the gate directly; tests call this to
  // make a leader that cannot confirm its leadership, as a paused process
  // finds itself). Until then nothing an agent sends is acted on, and nothing
  // leaves for an agent; both wait for the next confirmation
  // (docs/architecture.md, "Fencing"). Thread-safe; does not block.
  void ConfirmLeadershipUntil(std::chrono::steady_clock::time_point until);
  // Agent events held so far because the leadership was unconfirmed.
  int64_t HeldEvents() const;
  // A replica's role and the leader it knows: "leading", "standby" (leader
  // named in *leader), "waiting", "deposed"...; "single" without replicas.
  std::string ReplicaRole(std::string* leader = nullptr) const;

  Coordinator& coordinator();
  store::KvStore& store();

 private:
  class Impl;
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SERVER_H_
