// Interfaces, host name and routes on Linux (address text: src/net_common.cc).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "muster/platform/net.h"
#include "platform/posix/net_posix.h"

namespace muster::platform {

std::optional<int> TcpServicePort(absl::string_view name) {
  // getservbyname_r: getservbyname's static buffer is not thread-safe.
  servent se;
  servent* result = nullptr;
  char buf[1024];
  if (getservbyname_r(std::string(name).c_str(), "tcp", &se, buf, sizeof(buf),
                      &result) != 0 ||
      result == nullptr) {
    return std::nullopt;
  }
  return static_cast<int>(ntohs(static_cast<uint16_t>(result->s_port)));
}

namespace posix {
namespace {

int PrefixLength(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  const unsigned char* bytes = nullptr;
  int n = 0;
  if (mask->sa_family == AF_INET) {
    bytes = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else if (mask->sa_family == AF_INET6) {
    bytes = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    n = 16;
  } else {
    return 0;
  }
  int bits = 0;
  for (int i = 0; i < n; ++i) bits += __builtin_popcount(bytes[i]);
  return bits;
}

}  // namespace

std::vector<InterfaceAddress> Interfaces() {
  std::vector<InterfaceAddress> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress a;
    a.name = i->ifa_name;
    a.family = family == AF_INET ? IpFamily::kIpv4 : IpFamily::kIpv6;
    a.address = SockaddrToString(i->ifa_addr);
    a.prefix_len = PrefixLength(i->ifa_netmask);
    a.up = (i->ifa_flags & IFF_UP) != 0;
    a.running = (i->ifa_flags & IFF_RUNNING) != 0;
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(a));
  }
  freeifaddrs(ifs);
  return out;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

// A UDP connect picks the route and the source address but sends nothing.
std::string RouteSource(const std::string& address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!ToSockaddr(address, 9, &ss, &len)) return "";
  int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    sockaddr_storage local{};
    socklen_t llen = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) == 0) {
      out = SockaddrToString(reinterpret_cast<sockaddr*>(&local));
    }
  }
  close(fd);
  return out;
}

}  // namespace posix
}  // namespace muster::platform
