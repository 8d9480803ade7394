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
// same, every rank connects this backend instead of Gloo. It runs AllReduce
// (every size, every dtype and op: each rank sends its whole buffer to every
// peer, so it costs (N-1) x the message per rank), AllGather, Broadcast and
// Barrier; the other collectives and Send/Recv fail with UNIMPLEMENTED,
// saying why.
#ifndef MUSTER_COMM_SRC_DIRECT_BACKEND_H_
#define MUSTER_COMM_SRC_DIRECT_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"
#include "comm/src/direct_allreduce.h"

namespace muster::comm::internal {

// After a join that timed out (`status`): names the ranks that never
// published `key_prefix` + their rank, as DEADLINE_EXCEEDED with the hint;
// `status` when that says nothing.
absl::Status DescribeMissingPeers(const absl::Status& status,
                                  rendezvous::Store& store,
                                  const std::string& key_prefix, int rank,
                                  int world_size, absl::Duration timeout);

// This rank's mesh kind: "direct" when MUSTER_COMM_MESH=direct, else
// "gloo-" + `gloo_transport`. Sets *forced when the variable chose it.
// INVALID_ARGUMENT for a value other than auto or direct.
absl::StatusOr<std::string> MeshKind(absl::string_view gloo_transport,
                                     bool* forced);

// Publishes this rank's mesh kind and reads every rank's. Returns "" when all
// agree, else who runs what ("rank 0: gloo-TCP, rank 1: gloo-libuv").
absl::StatusOr<std::string> MeshMismatch(const CoreConfig& config,
                                         const std::string& mine,
                                         absl::Time deadline);

// Connects libmuster_comm's own mesh under `config.key_prefix` + "direct/"
// (`what` names it in errors): the Gloo backend's small allreduces and this
// backend's every collective.
absl::StatusOr<std::unique_ptr<DirectAllreduce>> ConnectDirectMesh(
    const CoreConfig& config, absl::string_view what, absl::Time deadline);

// Connects the mesh-only backend; `why` ends up in the UNIMPLEMENTED errors.
absl::StatusOr<std::unique_ptr<Backend>> ConnectDirectBackend(
    const CoreConfig& config, std::string why, absl::Time deadline);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_DIRECT_BACKEND_H_
