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
#include "gloo/transport/buffer.h"
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

// Sizes this rank's send buffer on every pair of a mesh, once, right before
// its first send from a bound buffer (why: gloo_mesh.cc). The receiving side
// is ready from connect on (a buffer registered on every pair for the peers'
// sizing messages), so each rank sizes its own sends when it first needs
// them, with no peer taking part and nothing spent at connect: a job whose
// collectives never run Gloo's algorithm classes never pays the 4 MB per
// peer.
class SendBufferSizer {
 public:
  // Registers, on every pair of `context`, the buffer the peers' messages
  // land in. `bytes`: SendBufferPinBytes(). Throws what Gloo throws.
  SendBufferSizer(PeerContext& context, size_t bytes);
  // Unregisters the buffers. Before the pairs go (they hold the buffers).
  ~SendBufferSizer();

  // The first call sends each peer one bound message of `bytes` and waits
  // until they are written (Gloo then sizes every pair's send buffer to
  // them); later calls return at once. One thread at a time, as the
  // collectives of a mesh. Throws what Gloo throws (a peer that dies
  // meanwhile: IoException); a call after a throw tries again.
  void SizeOnce(PeerContext& context);

 private:
  const size_t bytes_;
  const int slot_;  // The same on every rank: taken at connect.
  bool sized_ = false;
  // Where every peer's message lands: Gloo's single event-loop thread
  // writes them one at a time, and nobody reads them. Uninitialised, so
  // that a mesh that is never sized never touches its pages.
  std::unique_ptr<char[]> in_;
  std::vector<std::unique_ptr<::gloo::transport::Buffer>> recvs_;
  // Gloo's tcp::Buffer unregisters its *slot* from the pair when destroyed,
  // so a send buffer (same slot as the receive buffer) lives as long as
  // the receive buffers do.
  std::vector<std::unique_ptr<::gloo::transport::Buffer>> sends_;
  std::unique_ptr<char[]> out_;  // What sends_ send, until written.
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
  // Null where Gloo's transport has no bound buffers (gloo_device.h).
  std::unique_ptr<SendBufferSizer> sizer;
};

// Joins the full mesh published under `key_prefix`, makes it abortable
// (AbortableTransport) and readies the sizing of its send buffers
// (SendBufferSizer of `pin_bytes`). Blocks until connected or `deadline`.
// Errors: Gloo's (gloo_status.h), DEADLINE_EXCEEDED naming the peers that did
// not join.
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
