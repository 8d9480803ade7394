// The Gloo (TCP, host memory) backend of Communicator.
#ifndef MUSTER_COMM_GLOO_GLOO_COMMUNICATOR_H_
#define MUSTER_COMM_GLOO_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/comm/communicator.h"
#include "muster/rendezvous/store.h"

namespace muster::comm::internal {

// Options after the environment and defaults have been applied
// (src/communicator.cc).
struct GlooConfig {
  // Bounds joining and each collective. Positive.
  absl::Duration timeout;
  // The interface Gloo binds, when not empty; it must exist and have an IP
  // address.
  std::string iface;
  // Otherwise the address (or name) Gloo binds and advertises. Not empty when
  // iface is empty.
  std::string hostname;
  // Where the choice came from ("MUSTER_SOCKET_IFNAME", "every rank is on
  // this node", ...), for the debug log.
  std::string reason;
};

// Joins communicator `key_prefix` (the per-communicator namespace inside
// `store`) as `rank` of `world_size`. Arguments are already validated. Blocks
// until every peer is connected or the timeout passes. Errors as
// Communicator::Create.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(
    std::shared_ptr<rendezvous::Store> store, std::string key_prefix, int rank,
    int world_size, const GlooConfig& config);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_GLOO_COMMUNICATOR_H_
