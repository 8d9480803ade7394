// The host backend of a job whose ranks cannot share a Gloo mesh: collectives
// on libmuster_comm's own TCP mesh (DirectAllreduce) only.
//
// Why: Gloo's TCP transport (Linux) and its libuv transport (Windows) do not
// speak one protocol. TCP listens on one port per pair, and its messages start
// with a 48-byte header; libuv listens once per device, expects a 4-byte
// sequence number first on every connection, and its headers are 32 bytes. A
// job with Linux and Windows ranks cannot connect a Gloo mesh. libmuster_comm's
// own mesh (tcp_mesh.h, direct_allreduce.h) is the same fixed-width
// little-endian protocol on both, so such a job runs on it.
//
// Every rank publishes its mesh kind ("gloo-TCP", "gloo-libuv", or "direct"
// when MUSTER_COMM_MESH=direct) before connecting; when they are not all the
// same, every rank connects this backend instead of Gloo (comm/select/ makes
// that choice). It runs AllReduce
// (every size, every dtype and op: each rank sends its whole buffer to every
// peer, so it costs (N-1) x the message per rank), AllGather, Broadcast and
// Barrier; the other collectives and Send/Recv fail with UNIMPLEMENTED,
// saying why.
#ifndef MUSTER_COMM_DIRECT_DIRECT_BACKEND_H_
#define MUSTER_COMM_DIRECT_DIRECT_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"

namespace muster::comm::internal {

// Connects the mesh-only backend; `why` ends up in the UNIMPLEMENTED errors.
// Blocks until every peer is connected or `deadline`; errors as
// ConnectTcpMesh.
absl::StatusOr<std::unique_ptr<Backend>> ConnectDirectBackend(
    const CoreConfig& config, std::string why, absl::Time deadline);

// The same mesh (named "direct allreduce mesh" in errors) for the Gloo
// backend's small allreduces, which comm/select/ hands it as a
// BackendConnector: the Gloo backend runs only AllReduce on it.
absl::StatusOr<std::unique_ptr<Backend>> ConnectDirectAllReduce(
    const CoreConfig& config, absl::Time deadline);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_DIRECT_DIRECT_BACKEND_H_
