// The Windows Net (platform/windows/net_windows.cc, net_connect_windows.cc)
// on this host's loopback, under wine in ctest: interfaces, the TCP table,
// binds, free ports, connects (connected, refused), resolution, and the probe
// (common/src/probe.cc) over it.
// clang-format off
#include <winsock2.h>
#include <ws2tcpip.h>
// clang-format on

#include <cerrno>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/net.h"
#include "muster/common/probe.h"
#include "muster/platform/net.h"

namespace muster::platform {
namespace {

// A Winsock listener on 127.0.0.1 and a port Windows picks.
class Listener {
 public:
  Listener() {
    WSADATA data;
    WSAStartup(MAKEWORD(2, 2), &data);
    s_ = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int len = sizeof(a);
    if (s_ == INVALID_SOCKET ||
        bind(s_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(s_, 16) != 0 ||
        getsockname(s_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      Close();
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (s_ != INVALID_SOCKET) closesocket(s_);
    s_ = INVALID_SOCKET;
  }
  bool ok() const { return port_ != 0; }
  int port() const { return port_; }

 private:
  SOCKET s_ = INVALID_SOCKET;
  int port_ = 0;
};

TEST(WindowsNetTest, LoopbackInterfaceHostNameAndRoute) {
  Net& net = SystemNet();
  bool lo = false;
  for (const InterfaceAddress& a : net.Interfaces()) {
    EXPECT_FALSE(a.name.empty());
    if (a.address == "127.0.0.1") {
      lo = a.loopback && a.up && a.running && a.prefix_len == 8 &&
           a.family == IpFamily::kIpv4;
    }
  }
  EXPECT_TRUE(lo) << "no running loopback interface with 127.0.0.1/8";
  EXPECT_FALSE(net.Hostname().empty());
  EXPECT_NE(net.Hostname(), "localhost");
  EXPECT_EQ(net.RouteSource("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(net.RouteSource("not-an-address"), "");
}

TEST(WindowsNetTest, TheTcpTableBindsAndConnects) {
  Net& net = SystemNet();
  Listener l;
  ASSERT_TRUE(l.ok());
  bool listed = false;
  for (const TcpSocket& s : net.TcpSockets({l.port()})) {
    EXPECT_EQ(s.local_port, l.port());
    if (s.state == "LISTEN") listed = true;
  }
  EXPECT_TRUE(listed) << "port " << l.port() << " not in the TCP table";
  EXPECT_EQ(net.TryBind("127.0.0.1", l.port(), true), EADDRINUSE);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  EXPECT_TRUE(net.Connect("127.0.0.1", l.port(), deadline).connected);
  l.Close();
  EXPECT_EQ(net.TryBind("127.0.0.1", l.port(), true), 0);
  const ConnectAttempt refused = net.Connect("127.0.0.1", l.port(), deadline);
  EXPECT_FALSE(refused.connected);
  EXPECT_FALSE(refused.timed_out);
  EXPECT_EQ(refused.error, ECONNREFUSED);
  EXPECT_EQ(net.TryBind("not-an-address", 1, false), EINVAL);
  const ConnectAttempt bad = net.Connect("not-an-address", 1, deadline);
  EXPECT_TRUE(bad.socket_failed);
  absl::StatusOr<int> free_port = net.PickFreePort("127.0.0.1");
  ASSERT_TRUE(free_port.ok()) << free_port.status();
  EXPECT_GT(*free_port, 0);
  EXPECT_EQ(net.TryBind("127.0.0.1", *free_port, true), 0);
}

TEST(WindowsNetTest, ResolveNumericAndNames) {
  Net& net = SystemNet();
  Resolution numeric = net.Resolve("127.0.0.1", absl::Seconds(5));
  ASSERT_TRUE(numeric.ok) << numeric.error;
  EXPECT_THAT(numeric.addresses, ::testing::ElementsAre("127.0.0.1"));
  Resolution v6 = net.Resolve("::1", absl::Seconds(5));
  ASSERT_TRUE(v6.ok) << v6.error;
  EXPECT_THAT(v6.addresses, ::testing::ElementsAre("::1"));
  Resolution local = net.Resolve("localhost", absl::Seconds(10));
  ASSERT_TRUE(local.ok) << local.error;
  EXPECT_FALSE(local.addresses.empty());
  // .invalid never resolves (RFC 6761); the resolver may or may not answer
  // in time on a machine without DNS, but never with an address.
  Resolution none = net.Resolve("no-such-host.invalid", absl::Seconds(10));
  EXPECT_FALSE(none.ok);
  EXPECT_TRUE(none.addresses.empty());
  EXPECT_FALSE(none.error.empty());
  EXPECT_TRUE(ParseIpAddress("10.1.2.3").has_value());
  EXPECT_FALSE(ParseIpAddress("[::1]").has_value());
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.5"));
}

TEST(WindowsNetTest, ProbeClassifiesALoopbackListenerAndAClosedPort) {
  Listener l;
  ASSERT_TRUE(l.ok());
  const ProbeResult open = ProbeTcp("127.0.0.1", l.port(), absl::Seconds(10));
  EXPECT_EQ(open.outcome, ProbeOutcome::kOpen) << open.Explain();
  l.Close();
  const ProbeResult closed = ProbeTcp("127.0.0.1", l.port(), absl::Seconds(10));
  EXPECT_EQ(closed.outcome, ProbeOutcome::kRefused) << closed.Explain();
  EXPECT_EQ(closed.error_code, ECONNREFUSED);
  EXPECT_THAT(closed.detail, ::testing::HasSubstr("ECONNREFUSED"));
}

}  // namespace
}  // namespace muster::platform
