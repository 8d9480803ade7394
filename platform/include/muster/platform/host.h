// What libmuster_comm asks the operating system about this host and its
// processes, behind a small portable interface: the network interfaces and
// name resolution (for choosing where to bind), this process's id, and
// whether another process of this host still runs (for a store file left by a
// crashed run). posix/host.cc implements it with getifaddrs, getaddrinfo and
// /proc; windows/host_windows.cc with GetAdaptersAddresses and
// OpenProcess/GetProcessTimes.
#ifndef MUSTER_PLATFORM_HOST_H_
#define MUSTER_PLATFORM_HOST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muster::platform {

struct NetworkInterface {
  std::string name;  // "eth0"
  std::string ip;    // Numeric, without an IPv6 scope.
  bool loopback = false;
};

// Interfaces that are up and have an IP address, in the OS's order, each with
// its first IPv4 address (else its first IPv6 one). Errors: UNAVAILABLE
// naming the OS error.
absl::StatusOr<std::vector<NetworkInterface>> ListNetworkInterfaces();

// The numeric address `hostname` resolves to first. Errors:
// FAILED_PRECONDITION naming the host and the resolver's error, with the fix.
absl::StatusOr<std::string> ResolveHost(const std::string& hostname);

// This process's id.
int64_t CurrentProcessId();

// What tells process `pid` of this host from a later process given the same
// id: its start time as the OS records it (an opaque token). Empty when no
// such process exists.
std::string ProcessStartToken(int64_t pid);

// Whether process `pid` of this host runs and is the one whose
// ProcessStartToken was `start_token` (false when the id was reused).
bool ProcessRuns(int64_t pid, const std::string& start_token);

// Fills `out` with bytes from the operating system's cryptographic random
// generator (getrandom(2); BCryptGenRandom on Windows), for secrets. Not
// OpenSSL's RAND_bytes: a standalone launch needs 32 random bytes and nothing
// else of OpenSSL, whose first use (providers, name maps, its config file)
// cost more than a tenth of such a launch's CPU. Errors: UNAVAILABLE naming
// the OS error (never a weaker generator).
absl::Status RandomBytes(uint8_t* out, size_t size);

// The open-descriptor limit of this process before and after
// RaiseOpenFileLimit; -1 where the OS has no such per-process limit
// (Windows: handles are limited by memory only).
struct OpenFileLimit {
  int64_t before = -1;
  int64_t now = -1;
};

// Raises this process's soft limit on open descriptors to its hard limit, as
// a server that holds one connection per client needs (musterd: one per
// agent; Linux's usual soft limit is 1,024). Never lowers it.
OpenFileLimit RaiseOpenFileLimit();

// The GLIBC_TUNABLES value that makes glibc's malloc back its heaps with
// transparent huge pages (glibc.malloc.hugetlb=1, glibc 2.35+), given the
// current value (nullptr: unset); nullopt when the current value already
// names glibc.malloc.hugetlb (whatever its value: the operator's choice
// stands).
inline std::optional<std::string> HugePageMallocTunables(const char* current) {
  const std::string now = current == nullptr ? "" : current;
  if (now.find("glibc.malloc.hugetlb=") != std::string::npos) {
    return std::nullopt;
  }
  return now.empty() ? std::string("glibc.malloc.hugetlb=1")
                     : now + ":glibc.malloc.hugetlb=1";
}

// Re-executes this program, same binary and arguments, with
// HugePageMallocTunables in its environment. glibc reads tunables only at
// start-up, hence the exec. For musterd, whose heap grows to ~22 KB per agent
// (2.2 GB at 100,000): with 4 KB pages, faulting in and zeroing them was a
// third of its CPU forming such a round (docs/performance.md). Call first in
// main, before any thread. Returns when there was nothing to do or the exec
// failed (the process goes on as it was); does nothing on Windows.
void UseHugePagesForMalloc(char** argv);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_HOST_H_
