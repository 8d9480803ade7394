#include "muster/common/net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace muster {
namespace {

bool IsLoopbackSockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

std::vector<std::string> LocalInterfaceAddresses() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)
      continue;
    out.push_back(SockaddrToString(i->ifa_addr));
  }
  freeifaddrs(ifs);
  return out;
}

}  // namespace

std::string SockaddrToString(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf,
              sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr,
              buf, sizeof(buf));
  }
  return buf;
}

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos)
    return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, int default_port,
                                       bool allow_zero_port) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  HostPort hp;
  absl::string_view port_text;
  bool has_port = false;
  if (absl::ConsumePrefix(&t, "[")) {
    size_t close = t.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "address '", text, "' has '[' without ']'; write [IPv6]:PORT"));
    }
    hp.host = std::string(t.substr(0, close));
    absl::string_view rest = t.substr(close + 1);
    if (absl::ConsumePrefix(&rest, ":")) {
      port_text = rest;
      has_port = true;
    } else if (!rest.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "' is malformed"));
    }
  } else {
    size_t colon = t.rfind(':');
    if (colon != absl::string_view::npos && t.find(':') != colon) {
      // Several colons and no brackets: a bare IPv6 address.
      hp.host = std::string(t);
    } else if (colon != absl::string_view::npos) {
      hp.host = std::string(t.substr(0, colon));
      port_text = t.substr(colon + 1);
      has_port = true;
    } else {
      hp.host = std::string(t);
    }
  }
  if (has_port) {
    int port = 0;
    if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535 ||
        (port == 0 && !allow_zero_port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "' has port '", port_text,
                       "'; a port is a number in 1..65535"));
    }
    hp.port = port;
  } else {
    if (default_port < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "' has no port; write HOST:PORT"));
    }
    hp.port = default_port;
  }
  return hp;
}

std::string LocalHostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

bool IsLocalHost(absl::string_view host_view) {
  std::string host = absl::AsciiStrToLower(host_view);
  if (host.empty() || host == "localhost" ||
      host == absl::AsciiStrToLower(LocalHostname())) {
    return true;
  }
  std::vector<std::string> local = LocalInterfaceAddresses();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool is_local = false;
  for (addrinfo* a = res; a != nullptr && !is_local; a = a->ai_next) {
    if (IsLoopbackSockaddr(a->ai_addr)) {
      is_local = true;
      break;
    }
    std::string addr = SockaddrToString(a->ai_addr);
    for (const std::string& l : local) {
      if (l == addr) is_local = true;
    }
  }
  freeaddrinfo(res);
  return is_local;
}

std::string DefaultAdvertisedAddress() {
  ifaddrs* ifs = nullptr;
  std::string found;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0)
        continue;
      if (IsLoopbackSockaddr(i->ifa_addr)) continue;
      found = SockaddrToString(i->ifa_addr);
      break;
    }
    freeifaddrs(ifs);
  }
  if (!found.empty()) return found;
  return "127.0.0.1";
}

absl::StatusOr<int> PickFreePort(const std::string& host) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return absl::InternalError(
        absl::StrCat("socket(): ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    addr.sin_addr.s_addr = INADDR_ANY;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot bind a free port on ",
                                               host, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

bool CanConnect(const std::string& host, int port, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res) != 0)
    return false;
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    int fd =
        socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) ==
          1) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        ok = (err == 0);
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return ok;
}

std::string DescribePortOwner(int port) {
  // Find the socket inode listening on the port, then the process holding that
  // inode.
  std::vector<std::string> inodes;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::vector<std::string> cols =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (cols.size() < 10) continue;
      if (cols[3] != "0A") continue;  // TCP_LISTEN
      size_t colon = cols[1].rfind(':');
      if (colon == std::string::npos) continue;
      unsigned int p = 0;
      if (!absl::SimpleHexAtoi(cols[1].substr(colon + 1), &p) ||
          static_cast<int>(p) != port) {
        continue;
      }
      inodes.push_back(cols[9]);
    }
  }
  if (inodes.empty()) return "";
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return "";
  std::string result;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    bool match = false;
    while (dirent* fe = readdir(fds)) {
      char target[256] = {0};
      std::string link = absl::StrCat(fd_dir, "/", fe->d_name);
      ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      absl::string_view t(target, static_cast<size_t>(n));
      for (const std::string& inode : inodes) {
        if (t == absl::StrCat("socket:[", inode, "]")) match = true;
      }
      if (match) break;
    }
    closedir(fds);
    if (!match) continue;
    std::ifstream cmd(absl::StrCat("/proc/", pid, "/cmdline"));
    std::string cmdline((std::istreambuf_iterator<char>(cmd)),
                        std::istreambuf_iterator<char>());
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    result = absl::StrCat("pid ", pid, " (",
                          absl::StripTrailingAsciiWhitespace(cmdline), ")");
    break;
  }
  closedir(proc);
  return result;
}

}  // namespace muster
