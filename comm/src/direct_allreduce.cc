#include "comm/src/direct_allreduce.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/gloo/reduce.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

constexpr uint32_t kMagic = 0x4d444152;  // "MDAR"

// Precedes every message: a peer that called collectives in another order
// sends another sequence number or size, and is named instead of misread.
struct Header {
  uint32_t magic = 0;
  uint32_t reserved = 0;
  uint64_t seq = 0;
  uint64_t bytes = 0;
};

// What is left to send to, and to receive from, one peer.
struct Transfer {
  size_t sent = 0;  // Of sizeof(Header) + bytes.
  size_t received = 0;
  Header header;  // Received.
};

}  // namespace

absl::StatusOr<std::unique_ptr<DirectAllreduce>> DirectAllreduce::Connect(
    TcpMeshOptions options) {
  MUSTER_ASSIGN_OR_RETURN(std::vector<TcpMeshPeer> peers,
                          ConnectTcpMesh(options));
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const std::string why = std::strerror(errno);
    for (TcpMeshPeer& p : peers) CloseFd(p.fd);
    return absl::UnavailableError(
        absl::StrCat(options.who, ": ", options.what, ": eventfd: ", why));
  }
  return std::unique_ptr<DirectAllreduce>(new DirectAllreduce(
      options.rank, options.who, std::move(peers), wake_fd));
}

DirectAllreduce::DirectAllreduce(int rank, std::string who,
                                 std::vector<TcpMeshPeer> peers, int wake_fd)
    : rank_(rank),
      who_(std::move(who)),
      peers_(std::move(peers)),
      wake_fd_(wake_fd) {}

DirectAllreduce::~DirectAllreduce() {
  for (TcpMeshPeer& p : peers_) CloseFd(p.fd);
  CloseFd(wake_fd_);
}

void DirectAllreduce::Abort() {
  if (aborted_.exchange(true)) return;
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  // The descriptors stay open until the destructor, so these are ours.
  for (const TcpMeshPeer& p : peers_) {
    if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);
  }
}

absl::Status DirectAllreduce::Exchange(const void* data, size_t bytes,
                                       absl::Time deadline) {
  const int n = static_cast<int>(peers_.size());
  const size_t total = sizeof(Header) + bytes;
  Header mine;
  mine.magic = kMagic;
  mine.seq = seq_;
  mine.bytes = bytes;
  std::vector<Transfer> transfers(n);
  int pending = 2 * (n - 1);  // A send and a receive per peer.
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  bool first = true;
  while (pending > 0) {
    if (aborted_.load()) {
      return absl::AbortedError(absl::StrCat(who_, ": aborted"));
    }
    fds.clear();
    ranks.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    ranks.push_back(-1);
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      const Transfer& t = transfers[r];
      short events = 0;
      if (t.sent < total) events |= POLLOUT;
      if (t.received < total) events |= POLLIN;
      if (events != 0) {
        fds.push_back({peers_[r].fd, events, 0});
        ranks.push_back(r);
      }
    }
    if (first) {
      // Try every socket before sleeping: small messages usually go out at
      // once, and the peers' may already be here.
      for (pollfd& f : fds) f.revents = f.events;
      fds[0].revents = 0;
      first = false;
    } else {
      const int ms = PollMs(deadline);
      if (ms == 0) {
        return absl::DeadlineExceededError(
            absl::StrCat(who_, ": small allreduce timed out"));
      }
      if (::poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) {
        return absl::UnavailableError(
            absl::StrCat(who_, ": poll: ", std::strerror(errno)));
      }
      if (fds[0].revents != 0 || aborted_.load()) {
        return absl::AbortedError(absl::StrCat(who_, ": aborted"));
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int r = ranks[i];
      Transfer& t = transfers[r];
      const int fd = peers_[r].fd;
      if (t.sent < total && (fds[i].revents & (POLLOUT | POLLERR | POLLHUP))) {
        iovec iov[2];
        int count = 0;
        if (t.sent < sizeof(Header)) {
          iov[count++] = {reinterpret_cast<char*>(&mine) + t.sent,
                          sizeof(Header) - t.sent};
          if (bytes > 0) iov[count++] = {const_cast<void*>(data), bytes};
        } else {
          iov[count++] = {const_cast<char*>(static_cast<const char*>(data)) +
                              (t.sent - sizeof(Header)),
                          total - t.sent};
        }
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = count;
        const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
          t.sent += static_cast<size_t>(w);
          if (t.sent == total) --pending;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR) {
          return absl::UnavailableError(absl::StrCat(who_, ": sending to peer ",
                                                     peers_[r].name, ": ",
                                                     std::strerror(errno)));
        }
      }
      if (t.received < total &&
          (fds[i].revents & (POLLIN | POLLERR | POLLHUP))) {
        while (t.received < total) {
          char* into;
          size_t want;
          if (t.received < sizeof(Header)) {
            into = reinterpret_cast<char*>(&t.header) + t.received;
            want = sizeof(Header) - t.received;
          } else {
            into = inbox_.data() + static_cast<size_t>(r) * bytes +
                   (t.received - sizeof(Header));
            want = total - t.received;
          }
          const ssize_t got = ::recv(fd, into, want, MSG_DONTWAIT);
          if (got == 0) {
            return absl::UnavailableError(
                absl::StrCat(who_, ": the connection to peer ", peers_[r].name,
                             " closed during a small allreduce"));
          }
          if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return absl::UnavailableError(
                absl::StrCat(who_, ": receiving from peer ", peers_[r].name,
                             ": ", std::strerror(errno)));
          }
          const bool had_header = t.received >= sizeof(Header);
          t.received += static_cast<size_t>(got);
          if (!had_header && t.received >= sizeof(Header) &&
              (t.header.magic != kMagic || t.header.seq != seq_ ||
               t.header.bytes != bytes)) {
            return absl::InternalError(absl::StrCat(
                who_, ": peer ", peers_[r].name, " sent allreduce #",
                t.header.seq, " of ", t.header.bytes, " bytes while this rank ",
                "runs #", seq_, " of ", bytes,
                " bytes: the ranks called collectives in different orders or "
                "sizes"));
          }
        }
        if (t.received == total) --pending;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DirectAllreduce::Run(void* data, size_t count, DataType dtype,
                                  ReduceOp op, absl::Time deadline) {
  if (aborted_.load()) {
    return absl::AbortedError(absl::StrCat(who_, ": aborted"));
  }
  MUSTER_ASSIGN_OR_RETURN(ReduceFn fn, ReduceFunction(dtype, op));
  const int n = static_cast<int>(peers_.size());
  const size_t bytes = count * DataTypeSize(dtype);
  if (inbox_.size() < static_cast<size_t>(n) * bytes) {
    inbox_.resize(static_cast<size_t>(n) * bytes);
  }
  absl::Status exchanged = Exchange(data, bytes, deadline);
  ++seq_;
  if (!exchanged.ok()) {
    // Some bytes of this call may still be in flight: the mesh is out of
    // step for good. Aborting tells the peers at once.
    Abort();
    return exchanged;
  }
  // In rank order on every rank: the same additions in the same order.
  char* own = inbox_.data() + static_cast<size_t>(rank_) * bytes;
  std::memcpy(own, data, bytes);
  auto message = [&](int r) { return inbox_.data() + r * bytes; };
  fn(data, message(0), message(1), count);
  for (int r = 2; r < n; ++r) fn(data, data, message(r), count);
  return absl::OkStatus();
}

}  // namespace muster::comm::internal
