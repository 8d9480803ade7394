// ProbeTcp against real network behaviour: two network namespaces joined by a
// veth pair (tests/doctor/netns.h), iptables DROP and REJECT rules in the
// target namespace, routes that are missing, unreachable or prohibited. The
// probe runs on a thread that entered the client namespace with setns(2).
// Needs root; skips with a message where namespaces cannot be made.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/probe.h"
#include "tests/doctor/netns.h"
#include "tests/doctor/netns_fixture.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::NetnsPair;
using ::muster::testing::Subprocess;
using ::muster::testing::ToolPath;
using ::testing::HasSubstr;

class ProbeNetnsTest : public ::muster::testing::NetnsFixture {
 protected:
  // Runs ProbeTcp on a thread inside namespace a().
  ProbeResult ProbeFromA(const std::string& host, int port,
                         absl::Duration timeout = absl::Seconds(2)) {
    ProbeResult result;
    std::string error;
    std::thread t([&] {
      int fd = open(pair_->Path(pair_->a()).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        error = std::strerror(errno);
        if (fd >= 0) close(fd);
        return;
      }
      close(fd);
      result = ProbeTcp(host, port, timeout);
    });
    t.join();
    EXPECT_EQ(error, "") << "setns into " << pair_->a();
    return result;
  }

  // A listener in b(); killed before the namespaces go (members are
  // destroyed in reverse order).
  std::unique_ptr<Subprocess> ListenInB(const std::string& addr, int port) {
    auto p = std::make_unique<Subprocess>(
        pair_->In(pair_->b(), {BinPath("doctor_port_holder"), "--addr", addr,
                               "--port", absl::StrCat(port)}));
    EXPECT_TRUE(p->WaitForOutput("listening", absl::Seconds(10)))
        << p->Output();
    return p;
  }

  std::vector<std::unique_ptr<Subprocess>> listeners_;
};

TEST_F(ProbeNetnsTest, OpenAndRefused) {
  listeners_.push_back(ListenInB("0.0.0.0", 5000));
  ProbeResult open = ProbeFromA(NetnsPair::kAddrB, 5000);
  EXPECT_EQ(open.outcome, ProbeOutcome::kOpen) << open.detail;
  EXPECT_EQ(open.resolved_address, NetnsPair::kAddrB);

  ProbeResult refused = ProbeFromA(NetnsPair::kAddrB, 5001);
  EXPECT_EQ(refused.outcome, ProbeOutcome::kRefused) << refused.detail;
  EXPECT_EQ(refused.error_code, ECONNREFUSED);
  EXPECT_EQ(refused.icmp_type, -1);
  EXPECT_LT(refused.elapsed, absl::Seconds(1));
  EXPECT_THAT(refused.Explain(), HasSubstr("Nothing listens"));
}

TEST_F(ProbeNetnsTest, DropIsFilteredAndNamesTheFirewall) {
  listeners_.push_back(ListenInB("0.0.0.0", 5002));
  InB({"iptables", "-A", "INPUT", "-p", "tcp", "--dport", "5002", "-j",
       "DROP"});
  ProbeResult r = ProbeFromA(NetnsPair::kAddrB, 5002, absl::Seconds(1));
  EXPECT_EQ(r.outcome, ProbeOutcome::kFiltered) << r.detail;
  EXPECT_GE(r.elapsed, absl::Milliseconds(900));
  EXPECT_LT(r.elapsed, absl::Seconds(3));
  // b answered ARP, so the host is up and the SYN was dropped.
  EXPECT_THAT(r.detail, HasSubstr("answered ARP"));
  EXPECT_THAT(r.Explain(), HasSubstr("firewall"));
}

struct RejectCase {
  const char* reject_with;
  int icmp_code;
};

TEST_F(ProbeNetnsTest, IcmpRejectsAreRejectedWithTypeCodeAndSender) {
  const RejectCase cases[] = {
      {"icmp-port-unreachable", 3},  {"icmp-admin-prohibited", 13},
      {"icmp-host-prohibited", 10},  {"icmp-net-prohibited", 9},
      {"icmp-proto-unreachable", 2}, {"icmp-host-unreachable", 1},
      {"icmp-net-unreachable", 0},
  };
  int port = 5100;
  for (const RejectCase& c : cases) {
    InB({"iptables", "-A", "INPUT", "-p", "tcp", "--dport", absl::StrCat(port),
         "-j", "REJECT", "--reject-with", c.reject_with});
    ProbeResult r = ProbeFromA(NetnsPair::kAddrB, port);
    EXPECT_EQ(r.outcome, ProbeOutcome::kRejected)
        << c.reject_with << ": " << r.detail;
    EXPECT_EQ(r.icmp_type, 3) << c.reject_with;
    EXPECT_EQ(r.icmp_code, c.icmp_code) << c.reject_with;
    EXPECT_EQ(r.icmp_source, NetnsPair::kAddrB) << c.reject_with;
    EXPECT_THAT(r.Explain(), HasSubstr("REJECT rule")) << c.reject_with;
    ++port;
  }
}

TEST_F(ProbeNetnsTest, TcpResetRejectLooksLikeNothingListening) {
  // Documented: a reset is a reset; nothing tells this rule from a closed
  // port.
  InB({"iptables", "-A", "INPUT", "-p", "tcp", "--dport", "5200", "-j",
       "REJECT", "--reject-with", "tcp-reset"});
  ProbeResult r = ProbeFromA(NetnsPair::kAddrB, 5200);
  EXPECT_EQ(r.outcome, ProbeOutcome::kRefused) << r.detail;
}

TEST_F(ProbeNetnsTest, Ipv6RejectsAreRejected) {
  if (ToolPath("ip6tables").empty()) GTEST_SKIP() << "SKIPPED: no ip6tables";
  InB({"ip6tables", "-A", "INPUT", "-p", "tcp", "--dport", "5300", "-j",
       "REJECT"});
  InB({"ip6tables", "-A", "INPUT", "-p", "tcp", "--dport", "5301", "-j",
       "REJECT", "--reject-with", "icmp6-adm-prohibited"});
  ProbeResult port_unreach = ProbeFromA(NetnsPair::kAddr6B, 5300);
  EXPECT_EQ(port_unreach.outcome, ProbeOutcome::kRejected)
      << port_unreach.detail;
  EXPECT_TRUE(port_unreach.icmp_v6);
  EXPECT_EQ(port_unreach.icmp_type, 1);
  EXPECT_EQ(port_unreach.icmp_code, 4);
  ProbeResult adm = ProbeFromA(NetnsPair::kAddr6B, 5301);
  EXPECT_EQ(adm.outcome, ProbeOutcome::kRejected) << adm.detail;
  EXPECT_EQ(adm.icmp_code, 1);
  ProbeResult refused = ProbeFromA(NetnsPair::kAddr6B, 5302);
  EXPECT_EQ(refused.outcome, ProbeOutcome::kRefused) << refused.detail;
}

TEST_F(ProbeNetnsTest, UnreachableByRouteOrArp) {
  ProbeResult no_route = ProbeFromA("10.99.0.1", 5000);
  EXPECT_EQ(no_route.outcome, ProbeOutcome::kUnreachable) << no_route.detail;
  EXPECT_EQ(no_route.error_code, ENETUNREACH);

  InA({"ip", "route", "add", "unreachable", "10.98.0.0/16"});
  ProbeResult unreachable = ProbeFromA("10.98.0.1", 5000);
  EXPECT_EQ(unreachable.outcome, ProbeOutcome::kUnreachable)
      << unreachable.detail;
  EXPECT_EQ(unreachable.error_code, EHOSTUNREACH);

  InA({"ip", "route", "add", "blackhole", "10.96.0.0/16"});
  ProbeResult blackhole = ProbeFromA("10.96.0.1", 5000);
  EXPECT_EQ(blackhole.outcome, ProbeOutcome::kUnreachable) << blackhole.detail;

  // On the link, but nobody answers ARP for it.
  ProbeResult arp = ProbeFromA(NetnsPair::kUnowned, 5000, absl::Seconds(1));
  EXPECT_EQ(arp.outcome, ProbeOutcome::kUnreachable) << arp.detail;
  EXPECT_THAT(arp.detail, HasSubstr("ARP"));
}

TEST_F(ProbeNetnsTest, RejectedHereBeforeSending) {
  InA({"ip", "route", "add", "prohibit", "10.97.0.0/16"});
  ProbeResult prohibit = ProbeFromA("10.97.0.1", 5000);
  EXPECT_EQ(prohibit.outcome, ProbeOutcome::kRejected) << prohibit.detail;
  EXPECT_EQ(prohibit.error_code, EACCES);
  EXPECT_EQ(prohibit.icmp_type, -1);

  InA({"iptables", "-A", "OUTPUT", "-p", "tcp", "--dport", "5400", "-j",
       "REJECT"});
  ProbeResult output = ProbeFromA(NetnsPair::kAddrB, 5400);
  EXPECT_EQ(output.outcome, ProbeOutcome::kRejected) << output.detail;
  EXPECT_TRUE(output.icmp_from_this_host);
  EXPECT_EQ(output.icmp_source, NetnsPair::kAddrA);
  EXPECT_THAT(output.Fix(), HasSubstr("OUTPUT"));
}

}  // namespace
}  // namespace muster
