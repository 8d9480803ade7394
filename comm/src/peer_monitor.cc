#include "comm/src/peer_monitor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

constexpr uint32_t kHelloMagic = 0x4d535452;  // "MSTR"
constexpr char kGoodbye = 'B';
constexpr char kAbort = 'A';
// The longest abort text sent or accepted.
constexpr uint32_t kMaxText = 16 * 1024;
// How often the socket thread looks at the operation's deadline.
constexpr absl::Duration kDeadlineTick = absl::Milliseconds(100);
// A store wait is re-armed this often, which bounds how long Stop can block on
// a store that does not answer.
constexpr absl::Duration kStoreChunk = absl::Seconds(10);

struct Hello {
  uint32_t magic;
  int32_t rank;
  uint64_t token;
};

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

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

// Reads or writes exactly n bytes of a non-blocking socket before `deadline`.
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

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void SetKeepalive(int fd) {
  int on = 1;
  int idle = 10;
  int interval = 5;
  int count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host,
                                  const std::string& port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rv != 0 || result == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "peer monitor: cannot use address '", host, "': ", gai_strerror(rv)));
  }
  return result;
}

// Connects to ip:port before `deadline`; the socket is left non-blocking.
absl::StatusOr<int> ConnectTo(const std::string& ip, int port,
                              absl::Time deadline) {
  MUSTER_ASSIGN_OR_RETURN(addrinfo * ai,
                          Resolve(ip, absl::StrCat(port), /*passive=*/false));
  const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return absl::UnavailableError(Errno("peer monitor: socket"));
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
        absl::StrCat("peer monitor: connect to ", ip, ":", port, ": ", why));
  }
  return fd;
}

uint64_t RandomToken() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

PeerMonitor::PeerMonitor(PeerMonitorOptions options)
    : options_(std::move(options)),
      who_(absl::StrCat("rank ", options_.rank, "/", options_.world_size)),
      goodbye_(options_.world_size, false) {}

absl::StatusOr<std::unique_ptr<PeerMonitor>> PeerMonitor::Start(
    PeerMonitorOptions options) {
  std::unique_ptr<PeerMonitor> monitor(new PeerMonitor(std::move(options)));
  absl::Status connected = monitor->Connect();
  if (!connected.ok()) {
    // Nothing runs yet: close what is open.
    for (Peer& p : monitor->peers_) CloseFd(p.fd);
    CloseFd(monitor->listen_fd_);
    {
      absl::MutexLock lock(&monitor->mu_);
      monitor->stopped_ = true;
    }
    return connected;
  }
  monitor->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (monitor->wake_fd_ < 0) {
    return absl::UnavailableError(Errno("peer monitor: eventfd"));
  }
  PeerMonitor* m = monitor.get();
  m->socket_thread_ = std::thread([m] { m->SocketLoop(); });
  m->store_thread_ = std::thread([m] { m->StoreLoop(); });
  return monitor;
}

absl::Status PeerMonitor::Connect() {
  const int rank = options_.rank;
  const int n = options_.world_size;
  peers_.resize(n);
  token_ = RandomToken();

  // Listen on an ephemeral port of the backend's address.
  MUSTER_ASSIGN_OR_RETURN(addrinfo * ai,
                          Resolve(options_.bind_ip, "0", /*passive=*/true));
  listen_fd_ = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || ::bind(listen_fd_, ai->ai_addr, ai->ai_addrlen) != 0 ||
      ::listen(listen_fd_, std::max(n, 16)) != 0) {
    const std::string why = Errno(
        absl::StrCat("peer monitor: cannot listen on ", options_.bind_ip));
    freeaddrinfo(ai);
    return absl::UnavailableError(why);
  }
  freeaddrinfo(ai);
  SetNonBlocking(listen_fd_);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port =
      ntohs(bound.ss_family == AF_INET6
                ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  // "ip port token pid host" — everything a peer needs, and what names us in
  // its messages.
  const std::string key_root = options_.key_prefix + "monitor/";
  MUSTER_RETURN_IF_ERROR(Annotate(
      options_.store->Set(absl::StrCat(key_root, rank),
                          absl::StrCat(options_.bind_ip, " ", port, " ", token_,
                                       " ", getpid(), " ", LocalHostname())),
      absl::StrCat(who_, ": publishing the peer monitor's address")));

  auto describe = [](int r, const std::vector<std::string>& f) {
    return f.size() >= 5
               ? absl::StrCat("rank ", r, " (pid ", f[3], " on ", f[4], ")")
               : absl::StrCat("rank ", r);
  };

  // Connect to every higher rank: their kernels complete the handshake from
  // the listen backlog, so no rank waits on another's accept here.
  for (int r = rank + 1; r < n; ++r) {
    absl::StatusOr<std::string> value = options_.store->Get(
        absl::StrCat(key_root, r),
        std::max(options_.deadline - absl::Now(), absl::Milliseconds(1)));
    if (!value.ok()) {
      return Annotate(
          value.status(),
          absl::StrCat(who_, ": peer monitor: address of rank ", r));
    }
    std::vector<std::string> f = absl::StrSplit(*value, ' ');
    int peer_port = 0;
    uint64_t token = 0;
    if (f.size() < 3 || !absl::SimpleAtoi(f[1], &peer_port) ||
        !absl::SimpleAtoi(f[2], &token)) {
      return absl::InternalError(
          absl::StrCat(who_, ": peer monitor: malformed address of rank ", r,
                       ": '", *value, "'"));
    }
    MUSTER_ASSIGN_OR_RETURN(int fd,
                            ConnectTo(f[0], peer_port, options_.deadline));
    Hello hello{kHelloMagic, rank, token};
    if (!TransferAll(fd, &hello, sizeof(hello), /*write=*/true,
                     options_.deadline)) {
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(
          who_, ": peer monitor: sending hello to rank ", r, " failed"));
    }
    peers_[r] = Peer{r, fd, describe(r, f), "", false};
  }

  // Accept every lower rank.
  int missing = rank;
  while (missing > 0) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    const int ms = PollMs(options_.deadline);
    if (ms == 0) break;
    if (::poll(&pfd, 1, ms) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    SetNonBlocking(fd);
    Hello hello{};
    const absl::Time hello_deadline =
        std::min(options_.deadline, absl::Now() + absl::Seconds(10));
    if (!TransferAll(fd, &hello, sizeof(hello), /*write=*/false,
                     hello_deadline) ||
        hello.magic != kHelloMagic || hello.token != token_ || hello.rank < 0 ||
        hello.rank >= rank || peers_[hello.rank].fd >= 0) {
      ::close(fd);  // Not one of ours.
      continue;
    }
    absl::StatusOr<std::string> value = options_.store->Get(
        absl::StrCat(key_root, hello.rank), absl::ZeroDuration());
    std::vector<std::string> f;
    if (value.ok()) f = absl::StrSplit(*value, ' ');
    peers_[hello.rank] =
        Peer{hello.rank, fd, describe(hello.rank, f), "", false};
    --missing;
  }
  CloseFd(listen_fd_);
  if (missing > 0) {
    std::vector<int> absent;
    for (int r = 0; r < rank; ++r) {
      if (peers_[r].fd < 0) absent.push_back(r);
    }
    return absl::DeadlineExceededError(
        absl::StrCat(who_, ": peer monitor: ranks ",
                     absl::StrJoin(absent, ", "), " did not connect in time"));
  }
  for (Peer& p : peers_) {
    if (p.fd >= 0) SetKeepalive(p.fd);
  }
  return absl::OkStatus();
}

PeerMonitor::~PeerMonitor() { Stop(); }

void PeerMonitor::SetDeadline(absl::Time deadline) {
  deadline_ns_.store(deadline == absl::InfiniteFuture()
                         ? 0
                         : std::max<int64_t>(1, absl::ToUnixNanos(deadline)),
                     std::memory_order_relaxed);
}

bool PeerMonitor::PeerShutDown(int peer) const {
  absl::MutexLock lock(&mu_);
  return peer >= 0 && peer < static_cast<int>(goodbye_.size()) &&
         goodbye_[peer];
}

void PeerMonitor::TellPeers(const absl::Status& why) {
  std::string text = why.ToString();
  if (text.size() > kMaxText) text.resize(kMaxText);
  std::string message(1, kAbort);
  const uint32_t size = static_cast<uint32_t>(text.size());
  message.append(reinterpret_cast<const char*>(&size), sizeof(size));
  message += text;
  absl::MutexLock lock(&send_mu_);
  for (Peer& p : peers_) {
    if (p.fd < 0) continue;
    // The connections are idle: the message fits in the socket buffer. A
    // peer that is too far behind to take it learns otherwise.
    (void)::send(p.fd, message.data(), message.size(),
                 MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

void PeerMonitor::Verdict(const absl::Status& status) {
  if (stopping_.load() || verdict_given_.exchange(true)) return;
  MUSTER_LOG(DEBUG) << who_ << ": peer monitor: " << status;
  if (options_.on_abort) options_.on_abort(status);
}

bool PeerMonitor::Drain(Peer& p) {
  char buf[4096];
  while (true) {
    const ssize_t r = ::recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) {
      p.inbox.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // EOF or error: the connection ended. Handle what came before it.
    const int err = r < 0 ? errno : 0;
    while (!p.inbox.empty()) {
      if (p.inbox[0] == kGoodbye) {
        p.said_goodbye = true;
        p.inbox.erase(0, 1);
        continue;
      }
      break;  // An abort message is handled below, complete or not.
    }
    if (!p.inbox.empty() && p.inbox[0] == kAbort && p.inbox.size() > 5) {
      uint32_t size = 0;
      std::memcpy(&size, p.inbox.data() + 1, sizeof(size));
      const std::string text = p.inbox.substr(5, size);
      Verdict(absl::AbortedError(
          absl::StrCat("aborted because peer ", p.name, " failed: ", text)));
    }
    if (p.said_goodbye) {
      absl::MutexLock lock(&mu_);
      goodbye_[p.rank] = true;
    } else if (err == ETIMEDOUT) {
      Verdict(absl::AbortedError(absl::StrCat(
          "peer ", p.name,
          " stopped answering (TCP keepalive timed out): its machine may be "
          "down or unreachable")));
    } else {
      Verdict(absl::AbortedError(absl::StrCat(
          "peer ", p.name,
          " was lost: its connection closed without a goodbye (the process "
          "exited or was killed)",
          err != 0 ? absl::StrCat(": ", std::strerror(err)) : "")));
    }
    return false;
  }
  // Complete messages.
  while (!p.inbox.empty()) {
    if (p.inbox[0] == kGoodbye) {
      p.said_goodbye = true;
      p.inbox.erase(0, 1);
      absl::MutexLock lock(&mu_);
      goodbye_[p.rank] = true;
      continue;
    }
    if (p.inbox[0] == kAbort) {
      if (p.inbox.size() < 5) break;
      uint32_t size = 0;
      std::memcpy(&size, p.inbox.data() + 1, sizeof(size));
      if (size > kMaxText) size = kMaxText;
      if (p.inbox.size() < 5 + size) break;
      const std::string text = p.inbox.substr(5, size);
      p.inbox.erase(0, 5 + size);
      Verdict(absl::AbortedError(
          absl::StrCat("aborted because peer ", p.name, " failed: ", text)));
      continue;
    }
    // Garbage: not a peer of ours any more.
    p.inbox.clear();
    break;
  }
  return true;
}

void PeerMonitor::SocketLoop() {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  while (!stopping_.load()) {
    fds.clear();
    ranks.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    ranks.push_back(-1);
    for (Peer& p : peers_) {
      if (p.fd < 0) continue;
      fds.push_back({p.fd, POLLIN, 0});
      ranks.push_back(p.rank);
    }
    int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(kDeadlineTick));
    const int64_t deadline = deadline_ns_.load(std::memory_order_relaxed);
    if (deadline != 0) {
      timeout_ms =
          std::min(timeout_ms, PollMs(absl::FromUnixNanos(deadline)) + 1);
    }
    const int rv = ::poll(fds.data(), fds.size(), timeout_ms);
    if (stopping_.load()) break;
    if (rv > 0) {
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Peer& p = peers_[ranks[i]];
        if (!Drain(p)) {
          absl::MutexLock lock(&send_mu_);
          CloseFd(p.fd);
        }
      }
    }
    const int64_t now_deadline = deadline_ns_.load(std::memory_order_relaxed);
    if (now_deadline != 0 && absl::Now() > absl::FromUnixNanos(now_deadline)) {
      Verdict(
          absl::DeadlineExceededError("the operation ran past its timeout"));
      deadline_ns_.store(0);
    }
  }
}

std::string PeerMonitor::StopKey() const {
  return absl::StrCat(options_.key_prefix, "monitor_stop/", options_.rank);
}

void PeerMonitor::StoreLoop() {
  const std::string key = StopKey();
  while (!stopping_.load()) {
    absl::Status s = options_.store->Wait({key}, kStoreChunk);
    if (stopping_.load() || s.ok()) return;
    if (absl::IsDeadlineExceeded(s)) continue;
    if (absl::IsAborted(s)) {
      Verdict(absl::AbortedError(absl::StrCat(
          "the launcher ended this round (the round's store namespace was "
          "dropped: a worker failed, a node was lost, or the job ended): ",
          s.message())));
      return;
    }
    // The store is unreachable for now (musterd restarting, or the rank that
    // served it has exited): nothing to conclude; look again later.
    MUSTER_LOG(DEBUG) << who_ << ": peer monitor: store wait: " << s;
    store_stop_.WaitForNotificationWithTimeout(absl::Seconds(1));
  }
}

void PeerMonitor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  {
    // Goodbye first: a peer that sees it knows the EOF that follows is not a
    // crash.
    absl::MutexLock lock(&send_mu_);
    for (Peer& p : peers_) {
      if (p.fd < 0) continue;
      const char bye = kGoodbye;
      (void)::send(p.fd, &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  stopping_.store(true);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  store_stop_.Notify();
  if (store_thread_.joinable()) {
    // Wakes the store thread's wait. If the store is gone, the wait ends by
    // itself within kStoreChunk, or at once with UNAVAILABLE.
    (void)options_.store->Set(StopKey(), "stop");
    store_thread_.join();
  }
  if (socket_thread_.joinable()) socket_thread_.join();
  absl::MutexLock lock(&send_mu_);
  for (Peer& p : peers_) CloseFd(p.fd);
  CloseFd(wake_fd_);
  CloseFd(listen_fd_);
}

void PeerMonitor::CrashForTesting() {
  stopping_.store(true);  // Our own thread must not report the peers' EOF.
  absl::MutexLock lock(&send_mu_);
  for (Peer& p : peers_) {
    if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);
  }
}

}  // namespace muster::comm::internal
