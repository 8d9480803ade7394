#include "platform/fake/fake_net.h"

#include <algorithm>
#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace muster::platform {

InterfaceAddress FakeInterface(const std::string& name,
                               const std::string& address, int prefix_len,
                               bool up, bool running) {
  InterfaceAddress a;
  a.name = name;
  a.family = address.find(':') != std::string::npos ? IpFamily::kIpv6
                                                    : IpFamily::kIpv4;
  a.address = address;
  a.prefix_len = prefix_len;
  a.up = up;
  a.running = running;
  a.loopback = IsLoopbackAddress(address);
  return a;
}

FakeNet& FakeNet::AddInterface(const std::string& name,
                               const std::string& address, int prefix_len,
                               bool up, bool running) {
  interfaces.push_back(FakeInterface(name, address, prefix_len, up, running));
  return *this;
}

Resolution FakeNet::Resolve(const std::string& host, absl::Duration) {
  auto it = resolutions.find(host);
  if (it != resolutions.end()) return it->second;
  Resolution r;
  if (ParseIpAddress(host).has_value()) {
    r.ok = true;
    r.addresses = {host};
    return r;
  }
  r.error = "EAI_NONAME: no such name";
  r.message = "Name or service not known";
  return r;
}

std::string FakeNet::RouteSource(const std::string& address) {
  auto it = routes.find(address);
  return it == routes.end() ? "" : it->second;
}

std::vector<TcpSocket> FakeNet::TcpSockets(const std::vector<int>& ports) {
  std::vector<TcpSocket> out;
  for (const TcpSocket& s : sockets) {
    if (ports.empty() ||
        std::find(ports.begin(), ports.end(), s.local_port) != ports.end()) {
      out.push_back(s);
    }
  }
  return out;
}

int FakeNet::TryBind(const std::string& address, int port, bool) {
  auto a = address_bind_errors.find(address);
  if (a != address_bind_errors.end()) return a->second;
  auto it = bind_errors.find(port);
  return it == bind_errors.end() ? 0 : it->second;
}

absl::StatusOr<int> FakeNet::PickFreePort(const std::string&) {
  while (bind_errors.count(next_free_port) != 0) ++next_free_port;
  return next_free_port++;
}

ConnectAttempt FakeNet::Connect(const std::string& address, int port,
                                absl::Time) {
  auto it = connects.find(absl::StrCat(address, ":", port));
  if (it != connects.end()) return it->second;
  ConnectAttempt a;
  a.error = ECONNREFUSED;
  return a;
}

}  // namespace muster::platform
