// What each OS's socket.cc gives the portable connects of src/socket.cc:
// resolution, the one non-blocking connect with a deadline, and the switch to
// blocking I/O with timeouts. Private to platform.
#ifndef MUSTER_PLATFORM_SRC_SOCKET_OS_H_
#define MUSTER_PLATFORM_SRC_SOCKET_OS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/platform/socket.h"

namespace muster::platform::internal {

// One address to connect to: a sockaddr's bytes, and "host:port" for errors.
struct TcpAddress {
  std::string sockaddr;
  std::string label;
};

// host:port's addresses, in the resolver's order; `host` numeric unless
// `names`. Errors: FAILED_PRECONDITION "<what>: cannot use address ...".
absl::StatusOr<std::vector<TcpAddress>> ResolveTcp(const std::string& host,
                                                   int port, bool names,
                                                   const std::string& what);

// A connected non-blocking socket to `address`, made before `deadline`.
// Errors: UNAVAILABLE "<what>: connect to <label>: <OS error>".
absl::StatusOr<Socket> ConnectAddress(const TcpAddress& address,
                                      absl::Time deadline,
                                      const std::string& what);

// Blocking from now on, with send and receive timeouts of `timeout`.
void MakeBlocking(const Socket& socket, absl::Duration timeout);

}  // namespace muster::platform::internal

#endif  // MUSTER_PLATFORM_SRC_SOCKET_OS_H_
