// SystemNet() on Linux: the functions of net_*.cc behind the Net interface.
#include "muster/platform/net.h"
#include "platform/posix/net_posix.h"

namespace muster::platform {
namespace {

class PosixNet final : public Net {
 public:
  std::vector<InterfaceAddress> Interfaces() override {
    return posix::Interfaces();
  }
  std::string Hostname() override { return posix::Hostname(); }
  Resolution Resolve(const std::string& host, absl::Duration timeout) override {
    return posix::Resolve(host, timeout);
  }
  std::string RouteSource(const std::string& address) override {
    return posix::RouteSource(address);
  }
  std::vector<TcpSocket> TcpSockets(const std::vector<int>& ports) override {
    return posix::TcpSockets(ports);
  }
  int TryBind(const std::string& address, int port,
              bool reuse_address) override {
    return posix::TryBind(address, port, reuse_address);
  }
  absl::StatusOr<int> PickFreePort(const std::string& host) override {
    return posix::PickFreePort(host);
  }
  ConnectAttempt Connect(const std::string& address, int port,
                         absl::Time deadline) override {
    return posix::Connect(address, port, deadline);
  }
};

}  // namespace

Net& SystemNet() {
  static PosixNet* net = new PosixNet();
  return *net;
}

}  // namespace muster::platform
