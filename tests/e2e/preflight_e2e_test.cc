// The preflight across two network namespaces joined by a veth pair: with a
// firewall rule that drops one node's job port to the other, the round fails at
// once on both nodes, naming the pair, the port and the cause; without the rule
// the same job succeeds. Skips visibly where namespaces cannot be made (not
// root, no ip or iptables).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/doctor/netns.h"
#include "tests/doctor/netns_fixture.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::NetnsPair;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;

constexpr int kJobPort = 29555;   // MASTER_PORT, reserved by both nodes
constexpr int kRdzvPort = 29455;  // node rank 0's embedded server

std::vector<std::string> Node(const NetnsPair& net, int rank) {
  const std::string self = rank == 0 ? NetnsPair::kAddrA : NetnsPair::kAddrB;
  return net.In(
      rank == 0 ? net.a() : net.b(),
      {BinPath("muster"), "--nnodes=2", absl::StrCat("--node-rank=", rank),
       absl::StrCat("--master-addr=", NetnsPair::kAddrA),
       absl::StrCat("--master-port=", kJobPort),
       absl::StrCat("--rdzv-endpoint=", NetnsPair::kAddrA, ":", kRdzvPort),
       "--local-addr=" + self, "--rdzv-conf=preflight_timeout=1", "--no-python",
       BinPath("test_worker"), "--sleep=0.5"});
}

// A fresh pair of namespaces for each test, or a visible skip.
using PreflightE2eTest = testing::NetnsFixture;

TEST_F(PreflightE2eTest, ReachablePeersPassAndTheJobRuns) {
  Subprocess n0(Node(*pair_, 0));
  Subprocess n1(Node(*pair_, 1));
  EXPECT_EQ(n0.WaitOrKill(absl::Seconds(60)), 0) << n0.Output();
  EXPECT_EQ(n1.WaitOrKill(absl::Seconds(60)), 0) << n1.Output();
}

TEST_F(PreflightE2eTest, ADroppedPortFailsTheRoundNamingThePair) {
  // Node 0's host drops node 1's packets to the job port, as a firewall that
  // forgot it would.
  ASSERT_TRUE(pair_
                  ->ExecIn(pair_->a(), {"iptables", "-A", "INPUT", "-p", "tcp",
                                        "-s", NetnsPair::kAddrB, "--dport",
                                        absl::StrCat(kJobPort), "-j", "DROP"})
                  .ok());
  absl::Time start = absl::Now();
  Subprocess n0(Node(*pair_, 0));
  Subprocess n1(Node(*pair_, 1));
  EXPECT_EQ(n0.WaitOrKill(absl::Seconds(60)), 1) << n0.Output();
  EXPECT_EQ(n1.WaitOrKill(absl::Seconds(60)), 1) << n1.Output();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  for (Subprocess* node : {&n0, &n1}) {
    auto cause = testing::LinesWith(node->Output(), "root cause:");
    ASSERT_EQ(cause.size(), 1u) << node->Output();
    EXPECT_THAT(cause[0], HasSubstr("preflight"));
    EXPECT_THAT(cause[0], HasSubstr(absl::StrCat("(", NetnsPair::kAddrB,
                                                 ") cannot reach")));
    EXPECT_THAT(cause[0], HasSubstr(absl::StrCat("(", NetnsPair::kAddrA,
                                                 ") on TCP port ", kJobPort)));
    EXPECT_THAT(cause[0], HasSubstr("filtered"));
  }
  // Node 1, whose probe failed, never started its workers.
  EXPECT_THAT(n1.Output(), ::testing::Not(HasSubstr("test_worker rank")));
}

}  // namespace
}  // namespace muster
