// Name resolution with a deadline, one TCP connect with what came back, and
// binds, on Windows (Winsock). Windows has no ICMP error queue: a connect
// refused by the peer's stack reads as ECONNREFUSED, one that an ICMP error
// ends as EHOSTUNREACH/ENETUNREACH without the ICMP details, and a firewall
// that drops (Windows Firewall's default) or rejects with ICMP as a timeout or
// an unreachable error; probe.cc classifies those the same way as on Linux.
// clang-format off
#include "platform/windows/net_windows.h"
// clang-format on

#include <windows.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/windows/win_util.h"

namespace muster::platform::windows {
namespace {

// A socket closed when it goes out of scope.
class Socket {
 public:
  explicit Socket(SOCKET s) : s_(s) {}
  ~Socket() {
    if (s_ != INVALID_SOCKET) closesocket(s_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  SOCKET get() const { return s_; }
  bool valid() const { return s_ != INVALID_SOCKET; }

 private:
  const SOCKET s_;
};

// A TCP socket not inherited by the processes muster starts.
SOCKET NewTcpSocket(int family) {
  return WSASocketW(family, SOCK_STREAM, IPPROTO_TCP, nullptr, 0,
                    WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
}

}  // namespace

Resolution WindowsNet::Resolve(const std::string& host,
                               absl::Duration timeout) {
  if (!EnsureWinsock()) {
    Resolution r;
    r.error = "Winsock did not start (WSAStartup)";
    r.message = r.error;
    return r;
  }
  return net_internal::ResolveHost(host, timeout);
}

int WindowsNet::TryBind(const std::string& address, int port,
                        bool reuse_address) {
  if (!EnsureWinsock()) return EIO;
  sockaddr_storage ss{};
  int len = 0;
  if (!ToSockaddr(address, port, &ss, &len)) return EINVAL;
  Socket s(NewTcpSocket(ss.ss_family));
  if (!s.valid()) return ErrnoFromWinsock(WSAGetLastError());
  // A server on Windows does not set SO_REUSEADDR (there it would let a
  // second process take a bound port); a plain bind already succeeds over a
  // TIME_WAIT connection, which is what SO_REUSEADDR buys on Linux.
  (void)reuse_address;
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return ErrnoFromWinsock(WSAGetLastError());
  }
  return 0;
}

absl::StatusOr<int> WindowsNet::PickFreePort(const std::string& host) {
  if (!EnsureWinsock()) {
    return absl::UnavailableError("Winsock did not start (WSAStartup)");
  }
  Socket s(NewTcpSocket(AF_INET));
  if (!s.valid()) {
    return absl::InternalError(
        absl::StrCat("socket(): ", ErrorText(WSAGetLastError())));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    addr.sin_addr.s_addr = INADDR_ANY;
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind a free port on ",
                                               host, ": ",
                                               ErrorText(WSAGetLastError())));
  }
  int len = sizeof(addr);
  getsockname(s.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return static_cast<int>(ntohs(addr.sin_port));
}

ConnectAttempt WindowsNet::Connect(const std::string& address, int port,
                                   absl::Time deadline) {
  ConnectAttempt r;
  sockaddr_storage target{};
  int len = 0;
  if (!ToSockaddr(address, port, &target, &len)) {
    r.socket_failed = true;
    r.error = EINVAL;
    return r;
  }
  if (!EnsureWinsock()) {
    r.socket_failed = true;
    r.error = EIO;
    return r;
  }
  Socket s(NewTcpSocket(target.ss_family));
  if (!s.valid()) {
    r.socket_failed = true;
    r.error = ErrnoFromWinsock(WSAGetLastError());
    return r;
  }
  u_long nonblocking = 1;
  ioctlsocket(s.get(), FIONBIO, &nonblocking);
  int err = 0;
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&target), len) != 0) {
    err = WSAGetLastError();
  }
  if (err == WSAEWOULDBLOCK || err == WSAEINPROGRESS) {
    err = 0;
    bool done = false;
    while (!done) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      // A failed connect shows in the except set, a finished one in the
      // write set (select, not WSAPoll: WSAPoll missed failed connects on
      // Windows before 10 2004).
      fd_set wr;
      fd_set ex;
      FD_ZERO(&wr);
      FD_ZERO(&ex);
      FD_SET(s.get(), &wr);
      FD_SET(s.get(), &ex);
      const absl::Duration wait = std::min(left, absl::Milliseconds(200));
      timeval tv = absl::ToTimeval(absl::Ceil(wait, absl::Milliseconds(1)));
      const int n = select(0, nullptr, &wr, &ex, &tv);
      if (n == SOCKET_ERROR) {
        err = WSAGetLastError();
        done = true;
        break;
      }
      if (n == 0) continue;
      int so_error = 0;
      int elen = sizeof(so_error);
      getsockopt(s.get(), SOL_SOCKET, SO_ERROR,
                 reinterpret_cast<char*>(&so_error), &elen);
      err = so_error;
      done = true;
    }
    if (!done) {
      r.timed_out = true;
      return r;
    }
  }
  if (err == 0) {
    r.connected = true;
    return r;
  }
  r.error = ErrnoFromWinsock(err);
  return r;
}

}  // namespace muster::platform::windows
