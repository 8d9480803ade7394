#include "rendezvous/src/posix/loopback_listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"

namespace muster::rendezvous {

absl::StatusOr<std::unique_ptr<LoopbackListener>> LoopbackListener::Open() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on 127.0.0.1: ", std::strerror(err)));
  }
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("eventfd: ", std::strerror(err)));
  }
  return std::unique_ptr<LoopbackListener>(
      new LoopbackListener(fd, wake, ntohs(addr.sin_port)));
}

LoopbackListener::~LoopbackListener() {
  close(listen_fd_);
  close(wake_fd_);
}

int LoopbackListener::Accept() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      MUSTER_LOG(ERROR) << "the workers' store: poll: " << std::strerror(errno);
      return -1;
    }
    if (fds[1].revents != 0) return -1;
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
  }
}

void LoopbackListener::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void LoopbackListener::CloseConnection(int fd) { close(fd); }

}  // namespace muster::rendezvous
