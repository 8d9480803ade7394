// Windows implementation of muster/platform/host.h: GetAdaptersAddresses and
// getaddrinfo for the network; OpenProcess and GetProcessTimes for processes
// (a process's creation time tells it from a later one given the same id).
// clang-format off
// winsock2.h before windows.h (which would bring the old winsock.h).
#include <winsock2.h>
#include <iphlpapi.h>
#include <windows.h>
// bcrypt.h after windows.h: it uses its types.
#include <bcrypt.h>
#include <ws2tcpip.h>
// clang-format on

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/platform/host.h"
#include "platform/windows/win_util.h"
#include "platform/windows/winsock_init.h"

namespace muster::platform {
namespace {

std::string NumericHost(const sockaddr* addr, int len) {
  char host[NI_MAXHOST] = {};
  if (getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) !=
      0) {
    return "";
  }
  std::string ip = host;
  return ip.substr(0, ip.find('%'));  // Drop an IPv6 scope.
}

}  // namespace

absl::StatusOr<std::vector<NetworkInterface>> ListNetworkInterfaces() {
  EnsureWinsock();
  ULONG size = 16 << 10;
  std::vector<char> buffer;
  ULONG rv = ERROR_BUFFER_OVERFLOW;
  for (int attempt = 0; attempt < 4 && rv == ERROR_BUFFER_OVERFLOW; ++attempt) {
    buffer.resize(size);
    rv = GetAdaptersAddresses(
        AF_UNSPEC,
        GAA_FLAG_SKIP_ANYCAST | GAA_FLAG_SKIP_MULTICAST |
            GAA_FLAG_SKIP_DNS_SERVER,
        nullptr, reinterpret_cast<IP_ADAPTER_ADDRESSES*>(buffer.data()), &size);
  }
  if (rv != ERROR_SUCCESS) {
    return absl::UnavailableError(absl::StrCat(
        "GetAdaptersAddresses: ", platform::windows::ErrorText(rv)));
  }
  std::vector<NetworkInterface> out;
  for (int pass = 0; pass < 2; ++pass) {  // IPv4 first, then IPv6.
    const int family = pass == 0 ? AF_INET : AF_INET6;
    for (auto* a = reinterpret_cast<IP_ADAPTER_ADDRESSES*>(buffer.data());
         a != nullptr; a = a->Next) {
      if (a->OperStatus != IfOperStatusUp) continue;
      // The friendly name ("Ethernet 2") is what users see and type.
      const std::string name = platform::windows::Narrow(
          a->FriendlyName != nullptr ? a->FriendlyName : L"");
      bool known = false;
      for (const NetworkInterface& i : out) known |= i.name == name;
      if (known) continue;
      for (IP_ADAPTER_UNICAST_ADDRESS* u = a->FirstUnicastAddress; u != nullptr;
           u = u->Next) {
        const sockaddr* sa = u->Address.lpSockaddr;
        if (sa == nullptr || sa->sa_family != family) continue;
        const std::string ip = NumericHost(sa, u->Address.iSockaddrLength);
        if (ip.empty()) continue;
        out.push_back(
            NetworkInterface{name, ip, a->IfType == IF_TYPE_SOFTWARE_LOOPBACK});
        break;
      }
    }
  }
  return out;
}

absl::StatusOr<std::string> ResolveHost(const std::string& hostname) {
  EnsureWinsock();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (rv != 0 || result == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve '", hostname, "' (", WinsockErrorText(rv),
                     "); set CommOptions.hostname to an address of this "
                     "machine, or MUSTER_SOCKET_IFNAME to an interface"));
  }
  const std::string ip =
      NumericHost(result->ai_addr, static_cast<int>(result->ai_addrlen));
  freeaddrinfo(result);
  if (ip.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve '", hostname, "'"));
  }
  return ip;
}

int64_t CurrentProcessId() {
  return static_cast<int64_t>(GetCurrentProcessId());
}

// The creation time in 100 ns units since 1601, in decimal.
std::string ProcessStartToken(int64_t pid) {
  if (pid <= 0 || pid > UINT32_MAX) return "";
  platform::windows::UniqueHandle process(OpenProcess(
      PROCESS_QUERY_LIMITED_INFORMATION, FALSE, static_cast<DWORD>(pid)));
  if (!process.valid()) return "";
  FILETIME created, exited, kernel, user;
  if (!GetProcessTimes(process.get(), &created, &exited, &kernel, &user)) {
    return "";
  }
  return absl::StrCat((static_cast<uint64_t>(created.dwHighDateTime) << 32) |
                      created.dwLowDateTime);
}

bool ProcessRuns(int64_t pid, const std::string& start_token) {
  if (pid <= 0 || pid > UINT32_MAX) return false;
  platform::windows::UniqueHandle process(OpenProcess(
      PROCESS_QUERY_LIMITED_INFORMATION, FALSE, static_cast<DWORD>(pid)));
  if (!process.valid()) {
    // Access denied means it exists (another user's); gone otherwise.
    return GetLastError() == ERROR_ACCESS_DENIED;
  }
  DWORD code = 0;
  if (GetExitCodeProcess(process.get(), &code) && code != STILL_ACTIVE) {
    return false;  // Ended; someone still holds a handle to it.
  }
  return ProcessStartToken(pid) == start_token;
}

absl::Status RandomBytes(uint8_t* out, size_t size) {
  // The system's preferred generator: no algorithm handle to open or close.
  while (size > 0) {
    const ULONG chunk = static_cast<ULONG>(std::min<size_t>(size, 1u << 30));
    const NTSTATUS status =
        BCryptGenRandom(nullptr, out, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG);
    if (status < 0) {
      return absl::UnavailableError(
          absl::StrCat("BCryptGenRandom failed (NTSTATUS 0x",
                       absl::Hex(static_cast<uint32_t>(status)), ")"));
    }
    out += chunk;
    size -= chunk;
  }
  return absl::OkStatus();
}

OpenFileLimit RaiseOpenFileLimit() {
  return {};  // No per-process handle limit to raise.
}

void UseHugePagesForMalloc(char** /*argv*/) {}  // glibc's only

}  // namespace muster::platform
