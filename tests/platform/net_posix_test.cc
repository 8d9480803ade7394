// The Linux Net and ToolRunner on this host's loopback: interfaces, who
// holds a port, binds, resolution, connects, and commands with a deadline.
// Plus the probe's classification (common/src/probe.cc) over a FakeNet that
// shows what a firewall would send back.
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/probe.h"
#include "muster/platform/net.h"
#include "muster/platform/tool_runner.h"
#include "platform/fake/fake_net.h"
#include "tests/testing/tcp_listener.h"

namespace muster::platform {
namespace {

using ::testing::HasSubstr;

using ::muster::testing::TcpListener;

TEST(PosixNetTest, LoopbackInterfaceAndHostName) {
  Net& net = SystemNet();
  bool lo = false;
  for (const InterfaceAddress& a : net.Interfaces()) {
    if (a.address == "127.0.0.1") {
      lo = a.loopback && a.up && a.prefix_len == 8 &&
           a.family == IpFamily::kIpv4;
    }
  }
  EXPECT_TRUE(lo);
  EXPECT_FALSE(net.Hostname().empty());
  EXPECT_EQ(net.RouteSource("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(net.RouteSource("not-an-address"), "");
}

TEST(PosixNetTest, WhoHoldsAPortBindAndConnect) {
  Net& net = SystemNet();
  TcpListener l;
  ASSERT_TRUE(l.ok());
  bool mine = false;
  for (const TcpSocket& s : net.TcpSockets({l.port()})) {
    EXPECT_EQ(s.local_port, l.port());
    if (s.state == "LISTEN" && s.pid == getpid()) mine = true;
  }
  EXPECT_TRUE(mine);
  EXPECT_EQ(net.TryBind("127.0.0.1", l.port(), true), EADDRINUSE);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  EXPECT_TRUE(net.Connect("127.0.0.1", l.port(), deadline).connected);
  l.Close();
  EXPECT_EQ(net.TryBind("127.0.0.1", l.port(), true), 0);
  const ConnectAttempt refused = net.Connect("127.0.0.1", l.port(), deadline);
  EXPECT_FALSE(refused.connected);
  EXPECT_EQ(refused.error, ECONNREFUSED);
  EXPECT_FALSE(refused.icmp);
  auto port = net.PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
}

TEST(PosixNetTest, ResolveNumericNamesAndFailures) {
  Net& net = SystemNet();
  Resolution r = net.Resolve("::1", absl::Seconds(1));
  ASSERT_TRUE(r.ok);
  EXPECT_THAT(r.addresses, ::testing::ElementsAre("::1"));
  Resolution bad = net.Resolve("no-such-host.invalid", absl::Seconds(5));
  EXPECT_FALSE(bad.ok);
  EXPECT_THAT(bad.error, HasSubstr("EAI_"));
  EXPECT_FALSE(bad.message.empty());
}

TEST(PosixNetTest, AddressTextAndServices) {
  auto v4 = ParseIpAddress("10.1.2.3");
  ASSERT_TRUE(v4.has_value());
  EXPECT_EQ(v4->size(), 4);
  EXPECT_EQ(v4->bytes[3], 3);
  auto v6 = ParseIpAddress("fd00::2");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->family, IpFamily::kIpv6);
  EXPECT_FALSE(ParseIpAddress("node1").has_value());
  EXPECT_TRUE(IsLoopbackAddress("127.0.1.1"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
  EXPECT_EQ(TcpServicePort("ssh").value_or(0), 22);
  EXPECT_FALSE(TcpServicePort("no-such-service").has_value());
}

TEST(PosixToolRunnerTest, OutputExitCodeMissingAndDeadline) {
  ToolRunner& tools = SystemToolRunner();
  const std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"}};
  ToolResult r = tools.Run({"sh", "-c", "echo hi; echo err >&2; exit 3"}, env,
                           absl::Seconds(10));
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output, "hi\nerr\n");
  EXPECT_FALSE(tools.Run({"no-such-tool-here"}, env, absl::Seconds(1)).found);
  const absl::Time start = absl::Now();
  ToolResult slow = tools.Run({"sleep", "30"}, env, absl::Milliseconds(300));
  EXPECT_TRUE(slow.timed_out);
  EXPECT_EQ(slow.exit_code, 128 + 9);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// ---- The probe's classification of what a connect saw ----

ProbeResult ProbeVia(FakeNet& net, const ConnectAttempt& a) {
  net.connects["10.0.0.7:29500"] = a;
  return ProbeTcp(net, "10.0.0.7", 29500, absl::Seconds(1));
}

// A connect ended by ICMP type 3 `code` (IPv4) sent by `source`.
ConnectAttempt Icmp(int code, const std::string& source) {
  ConnectAttempt a;
  a.error = EHOSTUNREACH;
  a.icmp = true;
  a.icmp_type = 3;
  a.icmp_code = code;
  a.icmp_source = source;
  return a;
}

TEST(ProbeClassifyTest, EachOutcomeFromWhatCameBack) {
  FakeNet net;
  net.AddInterface("eth0", "10.0.0.5", 24);
  ConnectAttempt open;
  open.connected = true;
  EXPECT_EQ(ProbeVia(net, open).outcome, ProbeOutcome::kOpen);
  ConnectAttempt reset;
  reset.error = ECONNREFUSED;
  EXPECT_EQ(ProbeVia(net, reset).outcome, ProbeOutcome::kRefused);
  ConnectAttempt prohibited = Icmp(13, "10.0.0.7");  // admin-prohibited
  ProbeResult rejected = ProbeVia(net, prohibited);
  EXPECT_EQ(rejected.outcome, ProbeOutcome::kRejected);
  EXPECT_THAT(rejected.detail, HasSubstr("admin-prohibited"));
  EXPECT_THAT(rejected.detail, HasSubstr("(the target itself)"));
  prohibited.icmp_source = "10.0.0.5";  // our own OUTPUT rule
  EXPECT_TRUE(ProbeVia(net, prohibited).icmp_from_this_host);
  // host-unreachable from a router: a routing failure, not a firewall.
  EXPECT_EQ(ProbeVia(net, Icmp(1, "10.0.0.1")).outcome,
            ProbeOutcome::kUnreachable);
  ConnectAttempt silent;
  silent.timed_out = true;
  EXPECT_EQ(ProbeVia(net, silent).outcome, ProbeOutcome::kFiltered);
  silent.arp_state = "incomplete";
  EXPECT_EQ(ProbeVia(net, silent).outcome, ProbeOutcome::kUnreachable);
  ConnectAttempt blackhole;
  blackhole.error = EINVAL;
  EXPECT_THAT(ProbeVia(net, blackhole).detail, HasSubstr("blackhole"));
  EXPECT_EQ(ProbeTcp(net, "nowhere", 29500, absl::Seconds(1)).outcome,
            ProbeOutcome::kDnsFailure);
}

}  // namespace
}  // namespace muster::platform
