// POSIX (Linux) implementation of muster/platform/host.h: getifaddrs and
// getaddrinfo for the network, kill(pid, 0) and /proc/<pid>/stat for processes.
#include "muster/platform/host.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace muster::platform {

absl::StatusOr<std::vector<NetworkInterface>> ListNetworkInterfaces() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError(
        absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  std::vector<NetworkInterface> out;
  auto find = [&](const std::string& name) -> NetworkInterface* {
    for (NetworkInterface& i : out) {
      if (i.name == name) return &i;
    }
    return nullptr;
  };
  for (int pass = 0; pass < 2; ++pass) {  // IPv4 first, then IPv6.
    const int family = pass == 0 ? AF_INET : AF_INET6;
    for (struct ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
      if (ifa->ifa_name == nullptr || ifa->ifa_addr == nullptr ||
          ifa->ifa_addr->sa_family != family || !(ifa->ifa_flags & IFF_UP)) {
        continue;
      }
      if (find(ifa->ifa_name) != nullptr) continue;
      char host[NI_MAXHOST];
      const socklen_t len =
          family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      if (getnameinfo(ifa->ifa_addr, len, host, sizeof(host), nullptr, 0,
                      NI_NUMERICHOST) != 0) {
        continue;
      }
      std::string ip = host;
      ip = ip.substr(0, ip.find('%'));  // Drop an IPv6 scope.
      out.push_back(NetworkInterface{ifa->ifa_name, ip,
                                     (ifa->ifa_flags & IFF_LOOPBACK) != 0});
    }
  }
  freeifaddrs(list);
  return out;
}

absl::StatusOr<std::string> ResolveHost(const std::string& hostname) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (rv != 0 || result == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve '", hostname, "' (", gai_strerror(rv),
                     "); set CommOptions.hostname to an address of this "
                     "machine, or MUSTER_SOCKET_IFNAME to an interface"));
  }
  char host[NI_MAXHOST];
  const int ni = getnameinfo(result->ai_addr, result->ai_addrlen, host,
                             sizeof(host), nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(result);
  if (ni != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve '", hostname, "'"));
  }
  return std::string(host);
}

int64_t CurrentProcessId() { return static_cast<int64_t>(getpid()); }

// Field 22 of /proc/<pid>/stat: the start time in clock ticks since boot.
std::string ProcessStartToken(int64_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return "";
  std::vector<std::string> fields =
      absl::StrSplit(text.substr(close + 2), ' ', absl::SkipEmpty());
  // Fields after the name start at field 3 ("state"); starttime is field 22.
  return fields.size() > 19 ? fields[19] : "";
}

bool ProcessRuns(int64_t pid, const std::string& start_token) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  return ProcessStartToken(pid) == start_token;
}

absl::Status RandomBytes(uint8_t* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    // Blocks only before the kernel's pool is first initialised (early boot).
    const ssize_t n = getrandom(out + done, size - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

OpenFileLimit RaiseOpenFileLimit() {
  OpenFileLimit out;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return out;
  out.before = out.now = static_cast<int64_t>(limit.rlim_cur);
  if (limit.rlim_cur == RLIM_INFINITY) out.before = out.now = INT64_MAX;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < limit.rlim_max) {
    struct rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      out.now = limit.rlim_max == RLIM_INFINITY
                    ? INT64_MAX
                    : static_cast<int64_t>(limit.rlim_max);
    }
  }
  return out;
}

void UseHugePagesForMalloc(char** argv) {
  const char* before = getenv("GLIBC_TUNABLES");
  const std::optional<std::string> tunables = HugePageMallocTunables(before);
  if (!tunables.has_value()) return;  // set already: after the exec, or by hand
  const std::optional<std::string> saved =
      before == nullptr ? std::nullopt : std::optional<std::string>(before);
  if (setenv("GLIBC_TUNABLES", tunables->c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // No /proc (or no exec): go on with 4 KB pages, as before, with the
  // environment as it was.
  if (saved.has_value()) {
    setenv("GLIBC_TUNABLES", saved->c_str(), 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
}

}  // namespace muster::platform
