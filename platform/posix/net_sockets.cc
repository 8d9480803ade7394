// TCP sockets and their owners (/proc/net/tcp{,6} and /proc/<pid>/fd), and
// binding ports, on Linux.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "platform/posix/net_posix.h"

namespace muster::platform::posix {
namespace {

std::string TcpStateName(const std::string& hex) {
  static const std::map<std::string, std::string> kNames = {
      {"01", "ESTABLISHED"}, {"02", "SYN_SENT"},   {"03", "SYN_RECV"},
      {"04", "FIN_WAIT1"},   {"05", "FIN_WAIT2"},  {"06", "TIME_WAIT"},
      {"07", "CLOSE"},       {"08", "CLOSE_WAIT"}, {"09", "LAST_ACK"},
      {"0A", "LISTEN"},      {"0B", "CLOSING"}};
  auto it = kNames.find(hex);
  return it == kNames.end() ? hex : it->second;
}

// "0100007F:1F90" (IPv4) or 32 hex digits (IPv6) -> "127.0.0.1:8080".
std::string ProcAddress(const std::string& col, int* port) {
  size_t colon = col.rfind(':');
  if (colon == std::string::npos) return col;
  // The kernel writes well-formed hex; a column that is not leaves what
  // SimpleHexAtoi parsed (0 or a prefix) in the printed address, as before.
  unsigned int p = 0;
  (void)absl::SimpleHexAtoi(col.substr(colon + 1), &p);
  *port = static_cast<int>(p);
  std::string hex = col.substr(0, colon);
  char buf[INET6_ADDRSTRLEN] = {0};
  if (hex.size() == 8) {
    uint32_t a = 0;
    (void)absl::SimpleHexAtoi(hex, &a);
    in_addr in;
    in.s_addr = a;  // /proc prints the native-endian value
    inet_ntop(AF_INET, &in, buf, sizeof(buf));
    return absl::StrCat(buf, ":", p);
  }
  if (hex.size() == 32) {
    in6_addr in6;
    for (int w = 0; w < 4; ++w) {
      uint32_t v = 0;
      (void)absl::SimpleHexAtoi(hex.substr(w * 8, 8), &v);
      std::memcpy(&in6.s6_addr[w * 4], &v, 4);
    }
    inet_ntop(AF_INET6, &in6, buf, sizeof(buf));
    return absl::StrCat("[", buf, "]:", p);
  }
  return col;
}

std::string ReadCommandLine(int pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/cmdline"));
  std::string s((std::istreambuf_iterator<char>(f)),
                std::istreambuf_iterator<char>());
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return std::string(absl::StripTrailingAsciiWhitespace(s));
}

// Socket inode -> the first pid (in /proc order) that holds it.
std::map<std::string, int> SocketOwners() {
  std::map<std::string, int> owner;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return owner;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    while (dirent* fe = readdir(fds)) {
      char target[128] = {0};
      std::string link = absl::StrCat(fd_dir, "/", fe->d_name);
      ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      absl::string_view t(target, static_cast<size_t>(n));
      if (absl::ConsumePrefix(&t, "socket:[") && absl::ConsumeSuffix(&t, "]")) {
        owner.emplace(std::string(t), pid);
      }
    }
    closedir(fds);
  }
  closedir(proc);
  return owner;
}

}  // namespace

std::vector<TcpSocket> TcpSockets(const std::vector<int>& ports) {
  std::vector<TcpSocket> out;
  std::vector<std::string> inodes;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::vector<std::string> cols =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (cols.size() < 10) continue;
      TcpSocket s;
      int rport = 0;
      s.local = ProcAddress(cols[1], &s.local_port);
      if (!ports.empty() &&
          std::find(ports.begin(), ports.end(), s.local_port) == ports.end()) {
        continue;
      }
      s.remote = ProcAddress(cols[2], &rport);
      s.state = TcpStateName(cols[3]);
      out.push_back(std::move(s));
      inodes.push_back(cols[9]);
    }
  }
  if (out.empty()) return out;
  const std::map<std::string, int> owner = SocketOwners();
  std::map<int, std::string> commands;
  for (size_t i = 0; i < out.size(); ++i) {
    auto o = owner.find(inodes[i]);
    if (o == owner.end()) continue;
    out[i].pid = o->second;
    auto c = commands.find(o->second);
    if (c == commands.end()) {
      c = commands.emplace(o->second, ReadCommandLine(o->second)).first;
    }
    out[i].command = c->second;
  }
  return out;
}

int TryBind(const std::string& address, int port, bool reuse_address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!ToSockaddr(address, port, &ss, &len)) return EINVAL;
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (reuse_address) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  int err = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) err = errno;
  close(fd);
  return err;
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

}  // namespace muster::platform::posix
