// Preflight: when a round forms, before its workers start, an agent probes some
// of its peers on the port each reserved for the job (an ephemeral port, like
// the ones Gloo and NCCL will listen on). A peer that cannot be reached
// (filtered by a firewall, rejected, unreachable, a name that does not resolve)
// fails the round at once, naming both nodes, the port and the likely cause,
// instead of a collective hanging for 30 minutes later. "Refused" passes: the
// packets got through and the peer's host answered; nothing listens there yet
// because no worker has started.
#ifndef MUSTER_AGENT_SRC_PREFLIGHT_H_
#define MUSTER_AGENT_SRC_PREFLIGHT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::agent {

// The peers this node probes: group rank 0 (the master), its ring neighbours
// (the peers ring collectives talk to), and up to `sample` others chosen by a
// seed shared with nobody (so that across a large job every pair has a fair
// chance of being probed without n² probes). Never itself; never a peer twice.
std::vector<v1::Peer> ChoosePreflightPeers(const v1::RoundReady& ready,
                                           int sample = 8);

// Probes `peers` concurrently (each within `timeout`) and returns the first
// that is blocked, as the message to report, or nullopt when all can be
// reached. Blocks up to about `timeout`.
std::optional<v1::PreflightFailed> RunPreflight(
    const v1::RoundReady& ready, const std::vector<v1::Peer>& peers,
    absl::Duration timeout);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_PREFLIGHT_H_
