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
#include "platform/src/bsd_sockets.h"
#include "platform/src/socket_os.h"

namespace muster::platform {
namespace {

int Fd(SocketHandle handle) { return static_cast<int>(handle); }

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// What a send or receive returned (EINTR: would block, the caller polls and
// comes back).
IoResult Result(ssize_t r, bool receive) {
  const int error = r < 0 ? errno : 0;
  return internal::IoResultOf(
      r, receive, error,
      error == EAGAIN || error == EWOULDBLOCK || error == EINTR);
}

std::string GaiErrorText(int rv) { return gai_strerror(rv); }

}  // namespace

bool IoResult::TimedOut() const { return kind == kError && error == ETIMEDOUT; }

std::string IoResult::ErrorText() const { return std::strerror(error); }

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

namespace internal {

void CloseSocket(SocketHandle handle) { ::close(Fd(handle)); }

void ShutdownSocket(SocketHandle handle) { ::shutdown(Fd(handle), SHUT_RDWR); }

absl::StatusOr<Socket> ListenAddress(const TcpAddress& address, int backlog,
                                     int* port) {
  const Sockaddr at(address);
  Socket listener(::socket(at.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid() ||
      ::bind(Fd(listener.handle()), at.get(), at.len) != 0 ||
      ::listen(Fd(listener.handle()), backlog) != 0) {
    return absl::UnavailableError(std::strerror(errno));
  }
  SetNonBlocking(Fd(listener.handle()));
  *port = BoundPort(Fd(listener.handle()));
  return listener;
}

// The one non-blocking connect with a deadline.
absl::StatusOr<Socket> ConnectAddress(const TcpAddress& address,
                                      absl::Time deadline,
                                      const std::string& what) {
  const Sockaddr to(address);
  const std::string& label = address.label;
  Socket s(::socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": socket: ", std::strerror(errno)));
  }
  const int fd = Fd(s.handle());
  SetNonBlocking(fd);
  int rv = ::connect(fd, to.get(), to.len);
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

absl::StatusOr<std::vector<TcpAddress>> ResolveTcp(const std::string& host,
                                                   int port, bool passive,
                                                   bool names,
                                                   const std::string& what) {
  return internal::ResolveAddresses(host, port, passive, names, what,
                                    GaiErrorText);
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
  return WaitWith<pollfd>(
      timeout_ms, {POLLIN, POLLOUT, POLLERR | POLLHUP | POLLNVAL},
      [](std::vector<pollfd>& fds, int timeout, bool* interrupted,
         std::string* error) {
        const int rv = ::poll(fds.data(), fds.size(), timeout);
        if (rv < 0) {
          const int code = errno;
          *interrupted = code == EINTR;
          *error = absl::StrCat("poll: ", std::strerror(code));
        }
        return rv;
      });
}

}  // namespace muster::platform
