#include "comm/src/tcp_mesh.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "muster/common/net.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

constexpr uint32_t kHelloMagic = 0x4d535452;  // "MSTR"

struct Hello {
  uint32_t magic;
  int32_t rank;
  uint64_t token;
};

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void SetNoDelay(int fd) {
  int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host,
                                  const std::string& port, bool passive,
                                  absl::string_view what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rv != 0 || result == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": cannot use address '", host, "': ", gai_strerror(rv)));
  }
  return result;
}

// Connects to ip:port before `deadline`; the socket is left non-blocking.
absl::StatusOr<int> ConnectTo(const std::string& ip, int port,
                              absl::Time deadline, absl::string_view what) {
  MUSTER_ASSIGN_OR_RETURN(
      addrinfo * ai, Resolve(ip, absl::StrCat(port), /*passive=*/false, what));
  const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return absl::UnavailableError(Errno(absl::StrCat(what, ": socket")));
  }
  SetNonBlocking(fd);
  int rv = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rv != 0 && errno == EINPROGRESS) {
    pollfd pfd{fd, POLLOUT, 0};
    rv = ::poll(&pfd, 1, PollMs(deadline));
    int err = 0;
    socklen_t len = sizeof(err);
    if (rv == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
        err == 0) {
      rv = 0;
    } else {
      errno = rv == 0 ? ETIMEDOUT : err;
      rv = -1;
    }
  }
  if (rv != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat(what, ": connect to ", ip, ":", port, ": ", why));
  }
  return fd;
}

uint64_t RandomToken() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// "rank 2 (pid 4242 on host-a)" from a published address's fields.
std::string Describe(int r, const std::vector<std::string>& fields) {
  return fields.size() >= 5 ? absl::StrCat("rank ", r, " (pid ", fields[3],
                                           " on ", fields[4], ")")
                            : absl::StrCat("rank ", r);
}

// A listening socket, closed when the set-up ends either way.
struct Listener {
  int fd = -1;
  ~Listener() { CloseFd(fd); }
};

// The peers connected so far, closed unless handed to the caller.
struct Connected {
  std::vector<TcpMeshPeer> peers;
  ~Connected() {
    for (TcpMeshPeer& p : peers) CloseFd(p.fd);
  }
};

}  // namespace

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
      1000 * 60));
}

bool TransferAll(int fd, void* buf, size_t n, bool write, absl::Time deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r =
        write ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return false;  // EOF
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    const int ms = PollMs(deadline);
    if (ms == 0) return false;
    if (::poll(&pfd, 1, ms) < 0 && errno != EINTR) return false;
  }
  return true;
}

absl::StatusOr<std::vector<TcpMeshPeer>> ConnectTcpMesh(
    const TcpMeshOptions& options) {
  const int rank = options.rank;
  const int n = options.world_size;
  const std::string& what = options.what;
  const std::string& who = options.who;
  const uint64_t token = RandomToken();
  Connected connected;
  connected.peers.resize(n);

  // Listen on an ephemeral port of the backend's address.
  Listener listener;
  {
    MUSTER_ASSIGN_OR_RETURN(
        addrinfo * ai, Resolve(options.bind_ip, "0", /*passive=*/true, what));
    listener.fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener.fd < 0 ||
        ::bind(listener.fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        ::listen(listener.fd, std::max(n, 16)) != 0) {
      const std::string why =
          Errno(absl::StrCat(what, ": cannot listen on ", options.bind_ip));
      freeaddrinfo(ai);
      return absl::UnavailableError(why);
    }
    freeaddrinfo(ai);
  }
  SetNonBlocking(listener.fd);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listener.fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port =
      ntohs(bound.ss_family == AF_INET6
                ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  // "ip port token pid host": everything a peer needs, and what names us in
  // its messages.
  MUSTER_RETURN_IF_ERROR(Annotate(
      options.store->Set(absl::StrCat(options.key_root, rank),
                         absl::StrCat(options.bind_ip, " ", port, " ", token,
                                      " ", getpid(), " ", LocalHostname())),
      absl::StrCat(who, ": publishing the ", what, "'s address")));

  for (int r = rank + 1; r < n; ++r) {
    absl::StatusOr<std::string> value = options.store->Get(
        absl::StrCat(options.key_root, r),
        std::max(options.deadline - absl::Now(), absl::Milliseconds(1)));
    if (!value.ok()) {
      return Annotate(value.status(),
                      absl::StrCat(who, ": ", what, ": address of rank ", r));
    }
    std::vector<std::string> f = absl::StrSplit(*value, ' ');
    int peer_port = 0;
    uint64_t peer_token = 0;
    if (f.size() < 3 || !absl::SimpleAtoi(f[1], &peer_port) ||
        !absl::SimpleAtoi(f[2], &peer_token)) {
      return absl::InternalError(absl::StrCat(who, ": ", what,
                                              ": malformed address of rank ", r,
                                              ": '", *value, "'"));
    }
    MUSTER_ASSIGN_OR_RETURN(int fd,
                            ConnectTo(f[0], peer_port, options.deadline, what));
    connected.peers[r] = TcpMeshPeer{fd, Describe(r, f)};
    Hello hello{kHelloMagic, rank, peer_token};
    if (!TransferAll(fd, &hello, sizeof(hello), /*write=*/true,
                     options.deadline)) {
      return absl::UnavailableError(absl::StrCat(
          who, ": ", what, ": sending hello to rank ", r, " failed"));
    }
  }

  int missing = rank;
  while (missing > 0) {
    pollfd pfd{listener.fd, POLLIN, 0};
    const int ms = PollMs(options.deadline);
    if (ms == 0) break;
    if (::poll(&pfd, 1, ms) <= 0) continue;
    const int fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    SetNonBlocking(fd);
    Hello hello{};
    const absl::Time hello_deadline =
        std::min(options.deadline, absl::Now() + absl::Seconds(10));
    if (!TransferAll(fd, &hello, sizeof(hello), /*write=*/false,
                     hello_deadline) ||
        hello.magic != kHelloMagic || hello.token != token || hello.rank < 0 ||
        hello.rank >= rank || connected.peers[hello.rank].fd >= 0) {
      ::close(fd);  // Not one of ours.
      continue;
    }
    absl::StatusOr<std::string> value = options.store->Get(
        absl::StrCat(options.key_root, hello.rank), absl::ZeroDuration());
    std::vector<std::string> f;
    if (value.ok()) f = absl::StrSplit(*value, ' ');
    connected.peers[hello.rank] = TcpMeshPeer{fd, Describe(hello.rank, f)};
    --missing;
  }
  if (missing > 0) {
    std::vector<int> absent;
    for (int r = 0; r < rank; ++r) {
      if (connected.peers[r].fd < 0) absent.push_back(r);
    }
    return absl::DeadlineExceededError(
        absl::StrCat(who, ": ", what, ": ranks ", absl::StrJoin(absent, ", "),
                     " did not connect in time"));
  }
  for (TcpMeshPeer& p : connected.peers) {
    if (p.fd >= 0) SetNoDelay(p.fd);
  }
  return std::exchange(connected.peers, {});
}

}  // namespace muster::comm::internal
