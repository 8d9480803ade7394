// What each OS's socket.cc gives the portable listen and connects of
// src/socket.cc: resolution, the listening socket, the one non-blocking connect
// with a deadline, and the switch to blocking I/O with timeouts. Private to
// platform.
#ifndef MUSTER_PLATFORM_SRC_SOCKET_OS_H_
#define MUSTER_PLATFORM_SRC_SOCKET_OS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/platform/socket.h"

namespace muster::platform::internal {

// The OS's close and shutdown (both directions) of a valid socket.
void CloseSocket(SocketHandle handle);
void ShutdownSocket(SocketHandle handle);

// What a send or receive that returned `r` did: bytes moved (r > 0), the peer
// closed (0 on a receive), would block (0 on a send, or an error the OS
// means as "again": `again`), else the OS `error`.
IoResult IoResultOf(int64_t r, bool receive, int error, bool again);

// One address to connect to: a sockaddr's bytes, and "host:port" for errors.
struct TcpAddress {
  std::string sockaddr;
  std::string label;
};

// host:port's addresses, in the resolver's order; `host` numeric unless
// `names`; `passive` for a listener. Errors: FAILED_PRECONDITION "<what>:
// cannot use address ...".
absl::StatusOr<std::vector<TcpAddress>> ResolveTcp(const std::string& host,
                                                   int port, bool passive,
                                                   bool names,
                                                   const std::string& what);

// A connected non-blocking socket to `address`, made before `deadline`.
// Errors: UNAVAILABLE "<what>: connect to <label>: <OS error>".
absl::StatusOr<Socket> ConnectAddress(const TcpAddress& address,
                                      absl::Time deadline,
                                      const std::string& what);

// A socket listening on `address` (port 0: the kernel picks one, stored in
// *port); non-blocking where the OS's accept wants it. Errors: UNAVAILABLE with
// the OS's error text alone.
absl::StatusOr<Socket> ListenAddress(const TcpAddress& address, int backlog,
                                     int* port);

// Blocking from now on, with send and receive timeouts of `timeout`.
void MakeBlocking(const Socket& socket, absl::Duration timeout);

}  // namespace muster::platform::internal

#endif  // MUSTER_PLATFORM_SRC_SOCKET_OS_H_
