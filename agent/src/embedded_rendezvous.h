// The rendezvous an agent hosts itself, when its mode asks for one: the
// in-process rendezvous of --standalone (no gRPC server; see
// muster/rendezvous/local_rendezvous.h), or a gRPC RendezvousServer (static
// node rank 0, is_host, or the endpoint is this host and free).
#ifndef MUSTER_AGENT_SRC_EMBEDDED_RENDEZVOUS_H_
#define MUSTER_AGENT_SRC_EMBEDDED_RENDEZVOUS_H_

#include <memory>

#include "absl/status/status.h"
#include "muster/agent/config.h"
#include "muster/rendezvous/local_rendezvous.h"
#include "muster/rendezvous/server.h"

namespace muster::agent {

// Starts what `config` asks for into *server or *local (both stay null when
// this agent joins another's). A dynamic-mode agent that loses the race to
// host the endpoint joins the winner (OK, nothing started). Errors: the
// server's start error (a taken port: UNAVAILABLE; a bad address:
// INVALID_ARGUMENT). Blocks for the server's start (and a 200 ms connect
// probe in the is_host guess).
absl::Status StartEmbeddedRendezvous(
    const AgentConfig& config,
    std::unique_ptr<rendezvous::RendezvousServer>* server,
    std::unique_ptr<rendezvous::LocalRendezvous>* local);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_EMBEDDED_RENDEZVOUS_H_
