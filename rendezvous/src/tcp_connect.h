// A blocking TCP connection with a deadline, for the TLS probe of
// grpc_security.cc (an OpenSSL handshake needs a plain socket). The socket
// calls live in posix/tcp_connect.cc and windows/tcp_connect_windows.cc (a
// SOCKET handle as an int, as OpenSSL's SSL_set_fd takes it there).
#ifndef MUSTER_RENDEZVOUS_SRC_TCP_CONNECT_H_
#define MUSTER_RENDEZVOUS_SRC_TCP_CONNECT_H_

#include <string>

#include "absl/time/time.h"

namespace muster::rendezvous {

// A connected socket to host:port, made before `deadline`, blocking, with
// send and receive timeouts set to what is left of the deadline (at least 10
// ms); -1 when the name does not resolve or no address answers in time.
// The caller closes it with CloseSocket.
int ConnectTcp(const std::string& host, int port, absl::Time deadline);

void CloseSocket(int fd);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_TCP_CONNECT_H_
