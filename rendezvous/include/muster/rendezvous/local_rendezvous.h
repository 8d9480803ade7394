// LocalRendezvous: the rendezvous of a job that runs on one node only
// (`--standalone`), in process. There is no other agent to talk to, so the
// agent's session is a direct call into a Coordinator (no gRPC server, no
// stream, no heartbeats), and the Store service the workers bootstrap through
// starts only when a worker connects to it: the agent binds a loopback
// socket (microseconds) and tells the workers its address; the first
// connection starts a gRPC server with the Store service and no listening
// port of its own, and every accepted connection is handed to it. Workers
// that never use the store (`/bin/true`, a program without libmuster_comm)
// cost no gRPC server at all.
//
// What a standalone job gives up against the embedded RendezvousServer:
// `muster status` has no server to ask (there is one node; its own output
// says it all), and there is no grpc.health service.
//
// Thread-safe.
#ifndef MUSTER_RENDEZVOUS_LOCAL_RENDEZVOUS_H_
#define MUSTER_RENDEZVOUS_LOCAL_RENDEZVOUS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/store/kv_store.h"

namespace muster::rendezvous {

struct LocalRendezvousOptions {
  CoordinatorOptions coordinator;
  // How often the Coordinator's timers are checked (join and last-call
  // timeouts), as ServerOptions::tick_interval.
  absl::Duration tick_interval = absl::Milliseconds(20);
};

class LocalRendezvous {
 public:
  // Binds the Store's socket on 127.0.0.1 (an ephemeral port) and starts the
  // Coordinator's timer thread. Errors: UNAVAILABLE when no socket can be
  // bound.
  static absl::StatusOr<std::unique_ptr<LocalRendezvous>> Start(
      LocalRendezvousOptions options);

  // Shutdown() with the default grace.
  ~LocalRendezvous();
  LocalRendezvous(const LocalRendezvous&) = delete;
  LocalRendezvous& operator=(const LocalRendezvous&) = delete;

  // A session straight into the Coordinator. Its Start refuses a Join as the
  // server would (the Coordinator's errors); it never loses its server, so
  // Next reports UNAVAILABLE only after Shutdown. The Join's heartbeat
  // timeout is ignored: an agent cannot be lost from its own process.
  std::unique_ptr<RendezvousClient> NewClient();

  // "127.0.0.1:PORT": where the workers find the Store service.
  std::string store_endpoint() const;
  // Whether the Store service runs: on Linux once a worker has connected (it
  // starts on the first connection), on Windows from the start.
  bool store_started() const;

  // Ends the sessions (UNAVAILABLE), fails pending Store waits, stops the
  // Store service within `grace`, and joins the threads. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(1));

  Coordinator& coordinator();
  store::KvStore& store();

 private:
  class Impl;
  explicit LocalRendezvous(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_LOCAL_RENDEZVOUS_H_
