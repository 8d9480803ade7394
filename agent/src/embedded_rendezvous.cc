#include "agent/src/embedded_rendezvous.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/platform/env.h"

namespace muster::agent {

absl::Status StartEmbeddedRendezvous(
    const AgentConfig& config,
    std::unique_ptr<rendezvous::RendezvousServer>* server_out,
    std::unique_ptr<rendezvous::LocalRendezvous>* local_out) {
  if (config.mode == RendezvousMode::kStandalone) {
    // One node, so no other agent to reach: the session is a call into an
    // in-process Coordinator, and the workers' Store service starts only if
    // a worker connects (rendezvous/local_rendezvous.h). It saves the gRPC
    // server's start and shutdown, most of a no-op job's launch time.
    // MUSTER_STANDALONE_SERVER=1 embeds the gRPC server as before (for
    // `muster status` on a standalone job).
    if (platform::GetEnv("MUSTER_STANDALONE_SERVER").value_or("") != "1") {
      rendezvous::LocalRendezvousOptions options;
      options.coordinator.event_log_level = LogLevel::kDebug;
      auto local = rendezvous::LocalRendezvous::Start(std::move(options));
      if (!local.ok()) return local.status();
      *local_out = *std::move(local);
      MUSTER_LOG(DEBUG) << "in-process rendezvous; the workers' store at "
                        << (*local_out)->store_endpoint();
      return absl::OkStatus();
    }
  }
  std::string listen = config.embed_listen;
  bool embed = config.embed_server;
  // With several replicas (a list) the agent always joins: replicas are
  // musterd processes of their own, never embedded.
  if (!embed && config.embed_if_local &&
      config.rdzv_endpoint.find(',') == std::string::npos) {
    // torchrun's is_host guess: the endpoint names this host and nobody serves
    // it yet.
    auto hp = ParseHostPort(config.rdzv_endpoint, 29400,
                            /*allow_zero_port=*/true);
    const bool local = hp.ok() && IsLocalHost(hp->host);
    if (hp.ok() && hp->port == 0 && !local) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rdzv-endpoint=", config.rdzv_endpoint,
          ": port 0 starts the rendezvous server on a free port of this "
          "machine, but ",
          hp->host,
          " is not this machine; give the server's port, or this machine's "
          "name (e.g. localhost:0)"));
    }
    if (local &&
        (hp->port == 0 || !CanConnect(hp->host.empty() ? "127.0.0.1" : hp->host,
                                      hp->port, absl::Milliseconds(200)))) {
      embed = true;
      listen = absl::StrCat("0.0.0.0:", hp->port);
    }
  }
  if (!embed) return absl::OkStatus();
  rendezvous::ServerOptions options;
  options.listen = listen;
  if (config.max_nodes == 1) {
    // Only this node will ever join: its own lines say all the server's would.
    options.coordinator.event_log_level = LogLevel::kDebug;
  }
  auto server = rendezvous::RendezvousServer::Start(options);
  if (!server.ok()) {
    if (!config.embed_server) {
      // Another agent on this host won the race to host the server: join it as
      // a client.
      MUSTER_LOG(INFO) << "another agent hosts the rendezvous server at "
                       << config.rdzv_endpoint << "; joining it";
      return absl::OkStatus();
    }
    return server.status();
  }
  *server_out = *std::move(server);
  MUSTER_LOG(DEBUG) << "embedded rendezvous server on "
                    << (*server_out)->address();
  return absl::OkStatus();
}

}  // namespace muster::agent
