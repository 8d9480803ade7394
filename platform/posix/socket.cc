// POSIX (Linux) implementation of muster/platform/socket.h: BSD sockets opened
// non-blocking and close-on-exec, MSG_NOSIGNAL on every send, poll(2), and an
// eventfd as the wake-up.
#include "muster/platform/socket.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/src/socket_os.h"

namespace muster::platform {
namespace {

int Fd(SocketHandle handle) { return static_cast<int>(handle); }

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// What a send or receive returned, as an IoResult (EINTR: would block, the
// caller polls and comes back).
IoResult Result(ssize_t r, bool receive) {
  IoResult out;
  if (r > 0) {
    out.bytes = static_cast<size_t>(r);
    return out;
  }
  if (r == 0 && receive) {
    out.kind = IoResult::kClosed;
    return out;
  }
  if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    out.kind = IoResult::kWouldBlock;
    return out;
  }
  out.kind = IoResult::kError;
  out.error = errno;
  return out;
}

// getaddrinfo for a numeric address (or, with `names`, a host name too); the
// caller frees the result.
absl::StatusOr<addrinfo*> Resolve(const std::string& host,
                                  const std::string& port, bool passive,
                                  const std::string& what, bool names = false) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = (names ? 0 : AI_NUMERICHOST) | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rv != 0 || result == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": cannot use address '", host, "': ", gai_strerror(rv)));
  }
  return result;
}

}  // namespace

bool IoResult::TimedOut() const { return kind == kError && error == ETIMEDOUT; }

std::string IoResult::ErrorText() const { return std::strerror(error); }

void Socket::Close() {
  if (handle_ != kNoSocket) ::close(Fd(handle_));
  handle_ = kNoSocket;
}

void Socket::Shutdown() const {
  if (handle_ != kNoSocket) ::shutdown(Fd(handle_), SHUT_RDWR);
}

IoResult Socket::Send(const void* data, size_t size) const {
  return Result(::send(Fd(handle_), data, size, MSG_NOSIGNAL | MSG_DONTWAIT),
                /*receive=*/false);
}

IoResult Socket::SendV(const ConstBuffer* buffers, int count) const {
  iovec iov[8];
  count = std::min(count, 8);
  for (int i = 0; i < count; ++i) {
    iov[i] = {const_cast<void*>(buffers[i].data), buffers[i].size};
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(count);
  return Result(::sendmsg(Fd(handle_), &msg, MSG_NOSIGNAL | MSG_DONTWAIT),
                /*receive=*/false);
}

IoResult Socket::Recv(void* data, size_t size) const {
  return Result(::recv(Fd(handle_), data, size, MSG_DONTWAIT),
                /*receive=*/true);
}

void Socket::SetNoDelay() const {
  int on = 1;
  setsockopt(Fd(handle_), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

void Socket::SetKeepalive(absl::Duration idle, absl::Duration interval,
                          int count) const {
  int on = 1;
  int idle_s = static_cast<int>(absl::ToInt64Seconds(idle));
  int interval_s = static_cast<int>(absl::ToInt64Seconds(interval));
  const int fd = Fd(handle_);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

absl::StatusOr<Socket> ListenTcp(const std::string& ip, int backlog, int* port,
                                 const std::string& what) {
  absl::StatusOr<addrinfo*> ai = Resolve(ip, "0", /*passive=*/true, what);
  if (!ai.ok()) return ai.status();
  Socket listener(::socket((*ai)->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid() ||
      ::bind(Fd(listener.handle()), (*ai)->ai_addr, (*ai)->ai_addrlen) != 0 ||
      ::listen(Fd(listener.handle()), backlog) != 0) {
    const std::string why = std::strerror(errno);
    freeaddrinfo(*ai);
    return absl::UnavailableError(
        absl::StrCat(what, ": cannot listen on ", ip, ": ", why));
  }
  freeaddrinfo(*ai);
  SetNonBlocking(Fd(listener.handle()));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(Fd(listener.handle()), reinterpret_cast<sockaddr*>(&bound), &len);
  *port = ntohs(bound.ss_family == AF_INET6
                    ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return listener;
}

namespace internal {

absl::StatusOr<std::vector<TcpAddress>> ResolveTcp(const std::string& host,
                                                   int port, bool names,
                                                   const std::string& what) {
  absl::StatusOr<addrinfo*> ai =
      Resolve(host, absl::StrCat(port), /*passive=*/false, what, names);
  if (!ai.ok()) return ai.status();
  std::vector<TcpAddress> out;
  for (const addrinfo* a = *ai; a != nullptr; a = a->ai_next) {
    out.push_back({std::string(reinterpret_cast<const char*>(a->ai_addr),
                               static_cast<size_t>(a->ai_addrlen)),
                   absl::StrCat(host, ":", port)});
  }
  freeaddrinfo(*ai);
  return out;
}

// The one non-blocking connect with a deadline.
absl::StatusOr<Socket> ConnectAddress(const TcpAddress& address,
                                      absl::Time deadline,
                                      const std::string& what) {
  sockaddr_storage ss{};
  std::memcpy(&ss, address.sockaddr.data(),
              std::min(address.sockaddr.size(), sizeof(ss)));
  const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
  const std::string& label = address.label;
  Socket s(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": socket: ", std::strerror(errno)));
  }
  const int fd = Fd(s.handle());
  SetNonBlocking(fd);
  int rv = ::connect(fd, sa, static_cast<socklen_t>(address.sockaddr.size()));
  int error = rv == 0 ? 0 : errno;
  if (rv != 0 && error == EINPROGRESS) {
    pollfd pfd{fd, POLLOUT, 0};
    rv = ::poll(&pfd, 1, PollMs(deadline));
    int err = 0;
    socklen_t len = sizeof(err);
    if (rv == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
        err == 0) {
      rv = 0;
    } else {
      error = rv == 0 ? ETIMEDOUT : (rv < 0 ? errno : err);
      rv = -1;
    }
  }
  if (rv != 0) {
    return absl::UnavailableError(
        absl::StrCat(what, ": connect to ", label, ": ", std::strerror(error)));
  }
  return s;
}

void MakeBlocking(const Socket& socket, absl::Duration timeout) {
  const int fd = Fd(socket.handle());
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace internal

Socket Accept(const Socket& listener) {
  Socket s(::accept4(Fd(listener.handle()), nullptr, nullptr, SOCK_CLOEXEC));
  if (s.valid()) SetNonBlocking(Fd(s.handle()));
  return s;
}

absl::StatusOr<std::unique_ptr<Wakeup>> Wakeup::Create() {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<Wakeup>(new Wakeup(fd));
}

Wakeup::~Wakeup() { ::close(Fd(handle_)); }

void Wakeup::Signal() {
  const uint64_t one = 1;
  (void)!::write(Fd(handle_), &one, sizeof(one));
}

absl::StatusOr<int> PollSet::Wait(int timeout_ms) {
  // One array per thread, kept between calls: no allocation per wait.
  thread_local std::vector<pollfd> fds;
  fds.resize(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    fds[i] = pollfd{Fd(e.handle),
                    static_cast<short>(((e.events & kRead) ? POLLIN : 0) |
                                       ((e.events & kWrite) ? POLLOUT : 0)),
                    0};
  }
  const int rv = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rv < 0) {
    for (Entry& e : entries_) e.readable = e.writable = false;
    if (errno == EINTR) return 0;
    return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    const short r = fds[i].revents;
    const bool failed = (r & (POLLERR | POLLHUP | POLLNVAL)) != 0;
    entries_[i].readable =
        (entries_[i].events & kRead) && ((r & POLLIN) || failed);
    entries_[i].writable =
        (entries_[i].events & kWrite) && ((r & POLLOUT) || failed);
  }
  return rv;
}

}  // namespace muster::platform
