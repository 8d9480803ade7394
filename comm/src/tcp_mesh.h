// TcpMesh: a full mesh of TCP connections that libmuster_comm creates and owns
// itself, one per pair of ranks, bootstrapped through the Store.
//
// Two users: the peer monitor (idle connections whose EOF says a peer died)
// and the direct allreduce (small messages on sockets this library can abort
// at any moment, because it holds the descriptors: see direct_allreduce.h).
//
// Rank i publishes "ip port token pid host" under `key_root + i`, connects to
// every higher rank (their kernels complete the handshake from the listen
// backlog, so no rank waits on another's accept) and accepts every lower one.
// A hello carries the accepting rank's token, so a stray connection is refused.
#ifndef MUSTER_COMM_SRC_TCP_MESH_H_
#define MUSTER_COMM_SRC_TCP_MESH_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/src/os.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

struct TcpMeshOptions {
  int rank = 0;
  int world_size = 1;
  // The IP address to listen on (the one the backend uses).
  std::string bind_ip;
  std::shared_ptr<store::Store> store;
  // Where the ranks publish their addresses: `key_root + rank`.
  std::string key_root;
  // Bounds the whole set-up.
  absl::Time deadline;
  // Names this rank and the mesh in errors: "rank 1/4", "peer monitor".
  std::string who;
  std::string what;
};

struct TcpMeshPeer {
  Socket socket;     // Non-blocking, TCP_NODELAY; invalid for self.
  std::string name;  // "rank 2 (pid 4242 on host-a)"
};

// Connects the mesh. Returns one entry per rank (this rank's socket is
// invalid). Blocks until connected or the deadline.
// Errors: UNAVAILABLE (cannot listen or connect), DEADLINE_EXCEEDED naming the
// ranks missing, INTERNAL (a malformed address), the store's errors.
absl::StatusOr<std::vector<TcpMeshPeer>> ConnectTcpMesh(
    const TcpMeshOptions& options);

// Reads or writes exactly n bytes of a non-blocking socket before `deadline`.
// False on EOF, error or the deadline.
bool TransferAll(const Socket& socket, void* buf, size_t n, bool write,
                 absl::Time deadline);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_TCP_MESH_H_
