// Joining a Gloo full mesh for libmuster_comm's Gloo backend
// (gloo_communicator.cc): Gloo's timeouts, the context with what Gloo keeps
// protected, the peers' names for messages, send buffers sized once, and the
// mesh made abortable.
#ifndef MUSTER_COMM_GLOO_GLOO_MESH_H_
#define MUSTER_COMM_GLOO_GLOO_MESH_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/gloo/abortable_transport.h"
#include "comm/src/core.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/device.h"

namespace muster::comm::internal {

// `timeout` as Gloo takes it, clamped to [1 ms, 30 days]: Gloo multiplies
// its timeout by 5 in places and adds it to clock readings.
std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout);
// The time left until `deadline`, as ToGlooTimeout.
std::chrono::milliseconds Remaining(absl::Time deadline);

// Exposes what Gloo keeps protected: the address lists connectFullMesh
// publishes, and the transport context (to abort it).
class PeerContext : public ::gloo::rendezvous::Context {
 public:
  using ::gloo::rendezvous::Context::Context;
  using ::gloo::rendezvous::Context::extractAddress;
  std::shared_ptr<::gloo::transport::Context> transport() {
    return transportContext_;
  }
  // Every algorithm reaches the transport through this pointer.
  void set_transport(std::shared_ptr<::gloo::transport::Context> transport) {
    transportContext_ = std::move(transport);
  }
  // The counter nextSlot() hands slots out from.
  int slot() const { return slot_; }
  void set_slot(int slot) { slot_ = slot; }
};

// A Gloo full mesh with what libmuster_comm needs to know of it.
struct GlooMesh {
  std::shared_ptr<PeerContext> context;
  // Each peer's listening address for its pair with this rank, as Gloo
  // prints it ("[10.0.0.2]:41234"), indexed by rank (empty where unknown):
  // what error messages name.
  std::vector<std::string> peer_names;
  // Installed as the context's transport: what Abort fails.
  std::shared_ptr<AbortableTransport> transport;
};

// Joins the full mesh published under `key_prefix`, makes it abortable
// (AbortableTransport) and sizes its send buffers once (to `pin_bytes`; see
// gloo_mesh.cc). Blocks until connected or `deadline`. Errors: Gloo's
// (gloo_status.h), DEADLINE_EXCEEDED naming the peers that did not join.
absl::StatusOr<GlooMesh> ConnectMesh(
    const CoreConfig& config,
    std::shared_ptr<::gloo::transport::Device>& device,
    const std::string& key_prefix, absl::string_view doing, size_t pin_bytes,
    absl::Time deadline);

// The largest send buffer worth sizing a pair's to: net.core.wmem_max, at
// most 4 MB (see gloo_mesh.cc).
size_t SendBufferPinBytes();

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_GLOO_MESH_H_
