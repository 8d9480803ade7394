// SystemNet() on Windows, and the facts of the host: interfaces
// (GetAdaptersAddresses), the host name (GetComputerNameExA), the route to a
// peer (a UDP connect and getsockname, as on Linux) and the TCP table with each
// socket's owner (GetExtendedTcpTable, QueryFullProcessImageNameW). Connects,
// binds and name resolution are in net_connect_windows.cc; address text and
// getaddrinfo, as on Linux, in ../src/net_common.cc.
// clang-format off
#include "platform/windows/net_windows.h"
// clang-format on

#include <iphlpapi.h>
#include <windows.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/platform/net.h"
#include "platform/windows/win_util.h"

namespace muster::platform {

std::optional<int> TcpServicePort(absl::string_view name) {
  if (!windows::EnsureWinsock()) return std::nullopt;
  // Winsock's getservbyname returns per-thread storage: thread-safe here.
  const servent* se = getservbyname(std::string(name).c_str(), "tcp");
  if (se == nullptr) return std::nullopt;
  return static_cast<int>(ntohs(static_cast<uint16_t>(se->s_port)));
}

namespace windows {

bool EnsureWinsock() {
  static const bool ok = [] {
    WSADATA data;
    return WSAStartup(MAKEWORD(2, 2), &data) == 0;
  }();
  return ok;
}

int ErrnoFromWinsock(int wsa_error) {
  switch (wsa_error) {
    case 0:
      return 0;
    case WSAECONNREFUSED:
      return ECONNREFUSED;
    case WSAETIMEDOUT:
      return ETIMEDOUT;
    case WSAEHOSTUNREACH:
      return EHOSTUNREACH;
    case WSAENETUNREACH:
      return ENETUNREACH;
    case WSAENETDOWN:
      return ENETDOWN;
    case WSAEADDRINUSE:
      return EADDRINUSE;
    case WSAEADDRNOTAVAIL:
      return EADDRNOTAVAIL;
    case WSAEACCES:
      return EACCES;
    case WSAECONNRESET:
      return ECONNRESET;
    case WSAECONNABORTED:
      return ECONNABORTED;
    case WSAEAFNOSUPPORT:
      return EAFNOSUPPORT;
    case WSAENOPROTOOPT:
      return ENOPROTOOPT;
    case WSAEMFILE:
      return EMFILE;
    case WSAENOBUFS:
      return ENOBUFS;
    case WSAEINVAL:
    case WSAEFAULT:
      return EINVAL;
    default:
      return EIO;
  }
}

// Every unicast address of every adapter: the IPv4 ones first, then IPv6, as
// Linux lists them (callers that pick "the first address" agree across OSes).
// The name is the adapter's friendly name ("Ethernet", "Wi-Fi"), the one
// `Get-NetAdapter` and `netsh` show.
std::vector<InterfaceAddress> WindowsNet::Interfaces() {
  std::vector<InterfaceAddress> out;
  ULONG size = 16 * 1024;
  std::unique_ptr<char[]> buf;
  ULONG rc = ERROR_BUFFER_OVERFLOW;
  // The table can grow between the two calls: a few tries.
  for (int attempt = 0; attempt < 4 && rc == ERROR_BUFFER_OVERFLOW; ++attempt) {
    buf = std::make_unique<char[]>(size);
    rc = GetAdaptersAddresses(
        AF_UNSPEC,
        GAA_FLAG_SKIP_ANYCAST | GAA_FLAG_SKIP_MULTICAST |
            GAA_FLAG_SKIP_DNS_SERVER,
        nullptr, reinterpret_cast<IP_ADAPTER_ADDRESSES*>(buf.get()), &size);
  }
  if (rc != NO_ERROR) return out;
  for (int want : {AF_INET, AF_INET6}) {
    for (auto* a = reinterpret_cast<IP_ADAPTER_ADDRESSES*>(buf.get());
         a != nullptr; a = a->Next) {
      for (IP_ADAPTER_UNICAST_ADDRESS* u = a->FirstUnicastAddress; u != nullptr;
           u = u->Next) {
        const sockaddr* sa = u->Address.lpSockaddr;
        if (sa == nullptr || sa->sa_family != want) continue;
        InterfaceAddress i;
        i.name = a->FriendlyName != nullptr ? Narrow(a->FriendlyName)
                                            : std::string(a->AdapterName);
        i.family = want == AF_INET ? IpFamily::kIpv4 : IpFamily::kIpv6;
        i.address = SockaddrToString(sa);
        i.prefix_len = u->OnLinkPrefixLength;
        // Windows reports the operational state only: "up" is "not
        // disabled" (dormant adapters wait for a carrier).
        i.running = a->OperStatus == IfOperStatusUp;
        i.up = i.running || a->OperStatus == IfOperStatusDormant;
        i.loopback = a->IfType == IF_TYPE_SOFTWARE_LOOPBACK;
        out.push_back(std::move(i));
      }
    }
  }
  return out;
}

std::string WindowsNet::Hostname() {
  char buf[256] = {0};
  DWORD size = sizeof(buf);
  if (!GetComputerNameExA(ComputerNameDnsHostname, buf, &size) ||
      buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

// A UDP connect picks the route and the source address but sends nothing.
std::string WindowsNet::RouteSource(const std::string& address) {
  if (!EnsureWinsock()) return "";
  sockaddr_storage ss{};
  int len = 0;
  if (!ToSockaddr(address, 9, &ss, &len)) return "";
  SOCKET s = socket(ss.ss_family, SOCK_DGRAM, 0);
  if (s == INVALID_SOCKET) return "";
  std::string out;
  if (connect(s, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    sockaddr_storage local{};
    int llen = sizeof(local);
    if (getsockname(s, reinterpret_cast<sockaddr*>(&local), &llen) == 0) {
      out = SockaddrToString(reinterpret_cast<sockaddr*>(&local));
    }
  }
  closesocket(s);
  return out;
}

namespace {

std::string TcpStateName(DWORD state) {
  switch (state) {
    case MIB_TCP_STATE_CLOSED:
      return "CLOSE";
    case MIB_TCP_STATE_LISTEN:
      return "LISTEN";
    case MIB_TCP_STATE_SYN_SENT:
      return "SYN_SENT";
    case MIB_TCP_STATE_SYN_RCVD:
      return "SYN_RECV";
    case MIB_TCP_STATE_ESTAB:
      return "ESTABLISHED";
    case MIB_TCP_STATE_FIN_WAIT1:
      return "FIN_WAIT1";
    case MIB_TCP_STATE_FIN_WAIT2:
      return "FIN_WAIT2";
    case MIB_TCP_STATE_CLOSE_WAIT:
      return "CLOSE_WAIT";
    case MIB_TCP_STATE_CLOSING:
      return "CLOSING";
    case MIB_TCP_STATE_LAST_ACK:
      return "LAST_ACK";
    case MIB_TCP_STATE_TIME_WAIT:
      return "TIME_WAIT";
    default:
      return absl::StrCat(state);
  }
}

// The table's ports are in network order in the low 16 bits of a DWORD.
int TablePort(DWORD port) {
  return ntohs(static_cast<uint16_t>(port & 0xFFFF));
}

std::string V4(DWORD addr, int port) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = addr;
  return absl::StrCat(SockaddrToString(reinterpret_cast<sockaddr*>(&in)), ":",
                      port);
}

std::string V6(const UCHAR addr[16], int port) {
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  std::copy(addr, addr + 16, in6.sin6_addr.s6_addr);
  return absl::StrCat("[", SockaddrToString(reinterpret_cast<sockaddr*>(&in6)),
                      "]:", port);
}

// The owner's executable path, "" when Windows does not let us see it (a
// process of another user without elevation, the System process).
std::string ProcessImage(DWORD pid) {
  UniqueHandle h(OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid));
  if (!h.valid()) return "";
  wchar_t path[MAX_PATH * 2];
  DWORD size = sizeof(path) / sizeof(path[0]);
  if (!QueryFullProcessImageNameW(h.get(), 0, path, &size)) return "";
  return Narrow(std::wstring_view(path, size));
}

// One GetExtendedTcpTable of `family`, grown until it fits.
std::unique_ptr<char[]> TcpTable(ULONG family) {
  DWORD size = 0;
  std::unique_ptr<char[]> buf;
  DWORD rc = GetExtendedTcpTable(nullptr, &size, FALSE, family,
                                 TCP_TABLE_OWNER_PID_ALL, 0);
  for (int attempt = 0; attempt < 4 && rc == ERROR_INSUFFICIENT_BUFFER;
       ++attempt) {
    size += 4096;
    buf = std::make_unique<char[]>(size);
    rc = GetExtendedTcpTable(buf.get(), &size, FALSE, family,
                             TCP_TABLE_OWNER_PID_ALL, 0);
  }
  if (rc != NO_ERROR) return nullptr;
  return buf;
}

}  // namespace

namespace {

// The rows of one table (MIB_TCPTABLE_OWNER_PID or its IPv6 twin) whose local
// port is wanted; `text` formats a row's address and port.
template <typename Table, typename Text>
void AddRows(const char* buf, const std::vector<int>& ports, Text text,
             std::vector<TcpSocket>* out) {
  if (buf == nullptr) return;
  const auto* t = reinterpret_cast<const Table*>(buf);
  for (DWORD i = 0; i < t->dwNumEntries; ++i) {
    const auto& r = t->table[i];
    TcpSocket s;
    s.local_port = TablePort(r.dwLocalPort);
    if (!ports.empty() &&
        std::find(ports.begin(), ports.end(), s.local_port) == ports.end()) {
      continue;
    }
    s.local = text(r, /*local=*/true);
    s.remote = text(r, /*local=*/false);
    s.state = TcpStateName(r.dwState);
    s.pid = static_cast<int>(r.dwOwningPid);
    out->push_back(std::move(s));
  }
}

}  // namespace

std::vector<TcpSocket> WindowsNet::TcpSockets(const std::vector<int>& ports) {
  std::vector<TcpSocket> out;
  AddRows<MIB_TCPTABLE_OWNER_PID>(
      TcpTable(AF_INET).get(), ports,
      [](const MIB_TCPROW_OWNER_PID& r, bool local) {
        return local ? V4(r.dwLocalAddr, TablePort(r.dwLocalPort))
                     : V4(r.dwRemoteAddr, TablePort(r.dwRemotePort));
      },
      &out);
  AddRows<MIB_TCP6TABLE_OWNER_PID>(
      TcpTable(AF_INET6).get(), ports,
      [](const MIB_TCP6ROW_OWNER_PID& r, bool local) {
        return local ? V6(r.ucLocalAddr, TablePort(r.dwLocalPort))
                     : V6(r.ucRemoteAddr, TablePort(r.dwRemotePort));
      },
      &out);
  // The owner's image path stands for its command line (reading another
  // process's command line needs its memory; the path names it well enough).
  std::map<int, std::string> commands;
  for (TcpSocket& s : out) {
    if (s.pid == 0) continue;
    auto c = commands.find(s.pid);
    if (c == commands.end()) {
      c = commands.emplace(s.pid, ProcessImage(static_cast<DWORD>(s.pid)))
              .first;
    }
    s.command = c->second;
  }
  return out;
}

}  // namespace windows

Net& SystemNet() {
  static windows::WindowsNet* net = new windows::WindowsNet();
  return *net;
}

}  // namespace muster::platform
