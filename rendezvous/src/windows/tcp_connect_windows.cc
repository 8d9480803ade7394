// ConnectTcp on Windows (Winsock): the TLS probe's plain socket. The SOCKET is
// returned as an int, which is how OpenSSL's SSL_set_fd takes it on Windows.
// clang-format off
#include <winsock2.h>
#include <ws2tcpip.h>
// clang-format on

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "muster/platform/net.h"
#include "rendezvous/src/tcp_connect.h"

namespace muster::rendezvous {
namespace {

bool EnsureWinsock() {
  static const bool ok = [] {
    WSADATA data;
    return WSAStartup(MAKEWORD(2, 2), &data) == 0;
  }();
  return ok;
}

// Waits for a non-blocking connect until `deadline`; true when it connected.
bool Connected(SOCKET s, absl::Time deadline) {
  fd_set wr;
  fd_set ex;
  FD_ZERO(&wr);
  FD_ZERO(&ex);
  FD_SET(s, &wr);
  FD_SET(s, &ex);
  timeval tv =
      absl::ToTimeval(std::max(absl::ZeroDuration(), deadline - absl::Now()));
  if (select(0, nullptr, &wr, &ex, &tv) != 1) return false;
  int err = 0;
  int len = sizeof(err);
  return getsockopt(s, SOL_SOCKET, SO_ERROR, reinterpret_cast<char*>(&err),
                    &len) == 0 &&
         err == 0 && FD_ISSET(s, &wr);
}

}  // namespace

int ConnectTcp(const std::string& host, int port, absl::Time deadline) {
  if (!EnsureWinsock()) return -1;
  const platform::Resolution resolved =
      platform::SystemNet().Resolve(host, deadline - absl::Now());
  SOCKET s = INVALID_SOCKET;
  for (const std::string& address : resolved.addresses) {
    sockaddr_storage ss{};
    int len = sizeof(ss);
    std::string text = address;  // WSAStringToAddressA takes a char*
    if (WSAStringToAddressA(text.data(), AF_INET, nullptr,
                            reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      len = sizeof(ss);
      if (WSAStringToAddressA(text.data(), AF_INET6, nullptr,
                              reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
        continue;
      }
    }
    // sin_port and sin6_port sit at the same offset.
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port =
        htons(static_cast<u_short>(port));
    s = WSASocketW(ss.ss_family, SOCK_STREAM, IPPROTO_TCP, nullptr, 0,
                   WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
    if (s == INVALID_SOCKET) continue;
    u_long nonblocking = 1;
    ioctlsocket(s, FIONBIO, &nonblocking);
    const bool ok =
        connect(s, reinterpret_cast<sockaddr*>(&ss), len) == 0 ||
        (WSAGetLastError() == WSAEWOULDBLOCK && Connected(s, deadline));
    if (ok) break;
    closesocket(s);
    s = INVALID_SOCKET;
  }
  if (s == INVALID_SOCKET) return -1;
  u_long blocking = 0;
  ioctlsocket(s, FIONBIO, &blocking);
  // Windows takes these timeouts as milliseconds in a DWORD.
  const DWORD ms = static_cast<DWORD>(absl::ToInt64Milliseconds(
      std::max(absl::Milliseconds(10), deadline - absl::Now())));
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, reinterpret_cast<const char*>(&ms),
             sizeof(ms));
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, reinterpret_cast<const char*>(&ms),
             sizeof(ms));
  return static_cast<int>(s);
}

void CloseSocket(int fd) {
  if (fd >= 0) closesocket(static_cast<SOCKET>(fd));
}

}  // namespace muster::rendezvous
