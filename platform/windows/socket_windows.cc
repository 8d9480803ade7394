// Windows implementation of muster/platform/socket.h: Winsock 2 sockets made
// non-blocking (FIONBIO) and not inheritable, WSAPoll for readiness, and a
// UDP socket on 127.0.0.1 that sends itself a datagram as the wake-up (a
// Winsock poll watches sockets only; an event object cannot be in the set).
//
// Differences from POSIX that callers never see: there is no SIGPIPE (a send
// on a closed connection fails with WSAECONNRESET/WSAESHUTDOWN), a peer
// process that dies resets its connections (a receive fails with
// WSAECONNRESET instead of reading EOF: the callers treat both as the peer
// lost), and keepalive takes idle time and interval only (the probe count is
// the OS's, 10 on current Windows).
// clang-format off
// winsock2.h before windows.h (which would bring the old winsock.h).
#include <winsock2.h>
#include <mstcpip.h>
#include <windows.h>
#include <ws2tcpip.h>
// clang-format on

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/platform/socket.h"
#include "platform/src/bsd_sockets.h"
#include "platform/src/socket_os.h"
#include "platform/windows/winsock_init.h"

namespace muster::platform {
namespace {

SOCKET Sock(SocketHandle handle) { return static_cast<SOCKET>(handle); }

SocketHandle NewSocket(int family, int type, int protocol) {
  EnsureWinsock();
  const SOCKET s = WSASocketW(family, type, protocol, nullptr, 0,
                              WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
  if (s == INVALID_SOCKET) return kNoSocket;
  u_long on = 1;
  ioctlsocket(s, FIONBIO, &on);
  return static_cast<SocketHandle>(s);
}

// What a send or receive returned.
IoResult Result(int r, bool receive) {
  const int error = r < 0 ? WSAGetLastError() : 0;
  return internal::IoResultOf(r, receive, error,
                              error == WSAEWOULDBLOCK || error == WSAEINTR);
}

}  // namespace

bool IoResult::TimedOut() const {
  return kind == kError && error == WSAETIMEDOUT;
}

std::string IoResult::ErrorText() const { return WinsockErrorText(error); }

IoResult Socket::Send(const void* data, size_t size) const {
  const int n = static_cast<int>(std::min<size_t>(size, 1 << 30));
  return Result(::send(Sock(handle_), static_cast<const char*>(data), n, 0),
                /*receive=*/false);
}

IoResult Socket::SendV(const ConstBuffer* buffers, int count) const {
  WSABUF bufs[8];
  count = std::min(count, 8);
  for (int i = 0; i < count; ++i) {
    bufs[i].buf = static_cast<char*>(const_cast<void*>(buffers[i].data));
    bufs[i].len =
        static_cast<ULONG>(std::min<size_t>(buffers[i].size, 1 << 30));
  }
  DWORD sent = 0;
  const int rv = WSASend(Sock(handle_), bufs, static_cast<DWORD>(count), &sent,
                         0, nullptr, nullptr);
  return Result(rv == 0 ? static_cast<int>(sent) : SOCKET_ERROR,
                /*receive=*/false);
}

IoResult Socket::Recv(void* data, size_t size) const {
  const int n = static_cast<int>(std::min<size_t>(size, 1 << 30));
  return Result(::recv(Sock(handle_), static_cast<char*>(data), n, 0),
                /*receive=*/true);
}

void Socket::SetNoDelay() const {
  BOOL on = TRUE;
  setsockopt(Sock(handle_), IPPROTO_TCP, TCP_NODELAY,
             reinterpret_cast<const char*>(&on), sizeof(on));
}

void Socket::SetKeepalive(absl::Duration idle, absl::Duration interval,
                          int /*count*/) const {
  tcp_keepalive values{};
  values.onoff = 1;
  values.keepalivetime = static_cast<ULONG>(absl::ToInt64Milliseconds(idle));
  values.keepaliveinterval =
      static_cast<ULONG>(absl::ToInt64Milliseconds(interval));
  DWORD returned = 0;
  WSAIoctl(Sock(handle_), SIO_KEEPALIVE_VALS, &values, sizeof(values), nullptr,
           0, &returned, nullptr, nullptr);
}

namespace internal {

void CloseSocket(SocketHandle handle) { ::closesocket(Sock(handle)); }

void ShutdownSocket(SocketHandle handle) { ::shutdown(Sock(handle), SD_BOTH); }

absl::StatusOr<Socket> ListenAddress(const TcpAddress& address, int backlog,
                                     int* port) {
  const Sockaddr at(address);
  Socket listener(NewSocket(at.family(), SOCK_STREAM, IPPROTO_TCP));
  // Exclusive: no other socket may bind the same address and port (Windows
  // would otherwise let a socket with SO_REUSEADDR take it over).
  BOOL on = TRUE;
  if (listener.valid()) {
    setsockopt(Sock(listener.handle()), SOL_SOCKET, SO_EXCLUSIVEADDRUSE,
               reinterpret_cast<const char*>(&on), sizeof(on));
  }
  if (!listener.valid() ||
      ::bind(Sock(listener.handle()), at.get(), at.len) != 0 ||
      ::listen(Sock(listener.handle()), backlog) != 0) {
    return absl::UnavailableError(WinsockErrorText(WSAGetLastError()));
  }
  *port = BoundPort(Sock(listener.handle()));
  return listener;
}

absl::StatusOr<std::vector<TcpAddress>> ResolveTcp(const std::string& host,
                                                   int port, bool passive,
                                                   bool names,
                                                   const std::string& what) {
  EnsureWinsock();
  return internal::ResolveAddresses(host, port, passive, names, what,
                                    WinsockErrorText);
}

// The one non-blocking connect with a deadline.
absl::StatusOr<Socket> ConnectAddress(const TcpAddress& address,
                                      absl::Time deadline,
                                      const std::string& what) {
  const Sockaddr to(address);
  const std::string& label = address.label;
  Socket s(NewSocket(to.family(), SOCK_STREAM, IPPROTO_TCP));
  if (!s.valid()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": socket: ", WinsockErrorText(WSAGetLastError())));
  }
  const SOCKET sock = Sock(s.handle());
  int rv = ::connect(sock, to.get(), to.len);
  int error = rv == 0 ? 0 : WSAGetLastError();
  if (rv != 0 && error == WSAEWOULDBLOCK) {
    // select, not WSAPoll: WSAPoll does not report a refused connect on
    // older Windows; select lists it in the exception set.
    fd_set writable;
    fd_set failed;
    FD_ZERO(&writable);
    FD_ZERO(&failed);
    FD_SET(sock, &writable);
    FD_SET(sock, &failed);
    const int ms = PollMs(deadline);
    timeval tv{ms / 1000, (ms % 1000) * 1000};
    rv = ::select(0, nullptr, &writable, &failed, &tv);
    int err = 0;
    int len = sizeof(err);
    if (rv == 1 && FD_ISSET(sock, &writable) &&
        getsockopt(sock, SOL_SOCKET, SO_ERROR, reinterpret_cast<char*>(&err),
                   &len) == 0 &&
        err == 0) {
      rv = 0;
    } else {
      if (rv == 0) {
        error = WSAETIMEDOUT;
      } else if (rv < 0) {
        error = WSAGetLastError();
      } else {
        getsockopt(sock, SOL_SOCKET, SO_ERROR, reinterpret_cast<char*>(&err),
                   &len);
        error = err != 0 ? err : WSAECONNREFUSED;
      }
      rv = -1;
    }
  }
  if (rv != 0) {
    return absl::UnavailableError(absl::StrCat(what, ": connect to ", label,
                                               ": ", WinsockErrorText(error)));
  }
  return s;
}

void MakeBlocking(const Socket& socket, absl::Duration timeout) {
  const SOCKET sock = Sock(socket.handle());
  u_long blocking = 0;
  ioctlsocket(sock, FIONBIO, &blocking);
  // Windows takes these timeouts as milliseconds in a DWORD.
  const DWORD ms = static_cast<DWORD>(absl::ToInt64Milliseconds(timeout));
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, reinterpret_cast<const char*>(&ms),
             sizeof(ms));
  setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, reinterpret_cast<const char*>(&ms),
             sizeof(ms));
}

}  // namespace internal

Socket Accept(const Socket& listener) {
  const SOCKET s = ::accept(Sock(listener.handle()), nullptr, nullptr);
  if (s == INVALID_SOCKET) return Socket();
  // An accepted socket takes the listener's properties (non-blocking,
  // non-inheritable); said again, in case a layered provider forgets.
  u_long on = 1;
  ioctlsocket(s, FIONBIO, &on);
  SetHandleInformation(reinterpret_cast<HANDLE>(s), HANDLE_FLAG_INHERIT, 0);
  return Socket(static_cast<SocketHandle>(s));
}

// A UDP socket bound to 127.0.0.1 and connected to itself: Signal sends it
// one datagram, which stays queued (nobody reads it), so the socket stays
// readable: "set once signalled".
absl::StatusOr<std::unique_ptr<Wakeup>> Wakeup::Create() {
  Socket s(NewSocket(AF_INET, SOCK_DGRAM, IPPROTO_UDP));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int len = sizeof(addr);
  if (!s.valid() ||
      ::bind(Sock(s.handle()), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(Sock(s.handle()), reinterpret_cast<sockaddr*>(&addr), &len) !=
          0 ||
      ::connect(Sock(s.handle()), reinterpret_cast<sockaddr*>(&addr), len) !=
          0) {
    return absl::UnavailableError(absl::StrCat(
        "wake-up socket on 127.0.0.1: ", WinsockErrorText(WSAGetLastError())));
  }
  return std::unique_ptr<Wakeup>(new Wakeup(s.Release()));
}

Wakeup::~Wakeup() { ::closesocket(Sock(handle_)); }

void Wakeup::Signal() {
  const char one = 1;
  ::send(Sock(handle_), &one, 1, 0);
}

absl::StatusOr<int> PollSet::Wait(int timeout_ms) {
  return WaitWith<WSAPOLLFD>(
      timeout_ms, {POLLRDNORM, POLLWRNORM, POLLERR | POLLHUP | POLLNVAL},
      [](std::vector<WSAPOLLFD>& fds, int timeout, bool* interrupted,
         std::string* error) {
        // WSAPoll refuses an empty array: sleep as poll(2) would.
        if (fds.empty()) {
          Sleep(static_cast<DWORD>(std::max(timeout, 0)));
          return 0;
        }
        const int rv =
            WSAPoll(fds.data(), static_cast<ULONG>(fds.size()), timeout);
        if (rv < 0) {
          const int code = WSAGetLastError();
          *interrupted = code == WSAEINTR;
          *error = absl::StrCat("WSAPoll: ", WinsockErrorText(code));
        }
        return rv;
      });
}

}  // namespace muster::platform
