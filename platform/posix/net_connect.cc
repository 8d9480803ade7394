// Name resolution with a deadline, and one TCP connect with what came back
// (IP_RECVERR's error queue, the ARP table), on Linux. Classifying the
// outcome is portable and lives in common/src/probe.cc.
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "platform/posix/net_posix.h"

namespace muster::platform::posix {
namespace {

struct IcmpError {
  bool present = false;
  bool local = false;  // SO_EE_ORIGIN_LOCAL: raised by this host's stack
  bool v6 = false;
  int type = -1;
  int code = -1;
  std::string source;
};

IcmpError ReadErrorQueue(int fd) {
  IcmpError out;
  char control[512];
  char data[64];
  iovec iov{data, sizeof(data)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(&msg, c)) {
    const bool v4 = c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR;
    const bool v6 = c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR;
    if (!v4 && !v6) continue;
    sock_extended_err ee;
    std::memcpy(&ee, CMSG_DATA(c), sizeof(ee));
    if (ee.ee_origin == SO_EE_ORIGIN_ICMP ||
        ee.ee_origin == SO_EE_ORIGIN_ICMP6) {
      out.present = true;
      out.v6 = ee.ee_origin == SO_EE_ORIGIN_ICMP6;
      out.type = ee.ee_type;
      out.code = ee.ee_code;
      const auto* offender = reinterpret_cast<const sockaddr*>(
          CMSG_DATA(c) + sizeof(sock_extended_err));
      if (c->cmsg_len >= CMSG_LEN(sizeof(sock_extended_err) + sizeof(sockaddr)))
        out.source = SockaddrToString(offender);
    } else if (ee.ee_origin == SO_EE_ORIGIN_LOCAL) {
      out.local = true;
    }
    break;
  }
  return out;
}

// The ARP state of an IPv4 neighbour: "complete", "incomplete" (asked, never
// answered), or "" (not on the local link, or not asked).
std::string ArpState(const std::string& address) {
  // thread-self: this thread's network namespace, which setns(2) may have
  // made differ from the process's.
  std::ifstream f("/proc/thread-self/net/arp");
  if (!f) f.open("/proc/net/arp");
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::vector<std::string> cols =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (cols.size() < 6 || cols[0] != address) continue;
    unsigned int flags = 0;
    if (!absl::SimpleHexAtoi(cols[2], &flags)) continue;
    if ((flags & 0x2) != 0) return "complete";
    return "incomplete";
  }
  return "";
}

}  // namespace

Resolution Resolve(const std::string& host, absl::Duration timeout) {
  return net_internal::ResolveHost(host, timeout);
}

ConnectAttempt Connect(const std::string& address, int port,
                       absl::Time deadline) {
  ConnectAttempt r;
  sockaddr_storage target{};
  socklen_t len = 0;
  if (!ToSockaddr(address, port, &target, &len)) {
    r.socket_failed = true;
    r.error = EINVAL;
    return r;
  }
  const int family = target.ss_family;
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    r.socket_failed = true;
    r.error = errno;
    return r;
  }
  int one = 1;
  if (family == AF_INET) {
    setsockopt(fd, SOL_IP, IP_RECVERR, &one, sizeof(one));
  } else {
    setsockopt(fd, SOL_IPV6, IPV6_RECVERR, &one, sizeof(one));
  }
  int err = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&target), len) != 0) err = errno;
  if (err == EINPROGRESS || err == EINTR) {
    err = 0;
    bool done = false;
    while (!done) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      pollfd p{fd, POLLOUT, 0};
      const int ms = static_cast<int>(std::max<int64_t>(
          1,
          absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)))));
      const int n = poll(&p, 1, ms);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        err = errno;
        done = true;
        break;
      }
      if (n == 0) continue;
      socklen_t elen = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
      done = true;
    }
    if (!done) {
      r.timed_out = true;
      if (family == AF_INET) r.arp_state = ArpState(address);
      close(fd);
      return r;
    }
  }
  if (err == 0) {
    r.connected = true;
    close(fd);
    return r;
  }
  r.error = err;
  const IcmpError icmp = ReadErrorQueue(fd);
  close(fd);
  r.icmp = icmp.present;
  r.icmp_v6 = icmp.v6;
  r.icmp_type = icmp.type;
  r.icmp_code = icmp.code;
  r.icmp_source = icmp.source;
  r.local_error = icmp.local;
  return r;
}

}  // namespace muster::platform::posix
