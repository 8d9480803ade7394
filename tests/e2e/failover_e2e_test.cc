// musterd replicas (issue 25): the leader goes away mid-job and a standby
// takes over; the agents follow it, claim their round, and the new leader
// re-adopts it, so no worker restarts and the job succeeds.
//
// The replicas: the standby is an in-process RendezvousServer put in
// StandBy naming the leader (as the etcd election would); the test makes it
// Lead() after the leader is gone, as the election would once the old
// leader's etcd lease (2 s, plus up to 0.5 s of expiry checking) ran out.
// The leader is an in-process server shut down (its streams end at once), or
// a real musterd process that is SIGSTOPped (its connections stay open: the
// agents notice the silence) or killed with SIGKILL.
//
// Two real agents (`muster --rdzv-endpoint=STANDBY,LEADER`, the default
// lease for replicas) run 2 workers each: a bash script that logs its start
// and its MUSTER_STORE_ENDPOINT, and waits for a file to finish.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/server.h"
#include "tests/testing/files.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::ReadLines;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;

class FailoverE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("failover");
    starts_ = dir_ + "/starts";
    finish_ = dir_ + "/finish";
    worker_ = dir_ + "/worker.sh";
    std::ofstream(worker_)
        << "#!/bin/bash\n"
        << "echo \"start $RANK $MUSTER_ROUND $$ $MUSTER_STORE_ENDPOINT\" >> \""
        << starts_ << "\"\n"
        << "for i in $(seq 1 1200); do\n"
        << "  [ -e \"" << finish_ << "\" ] && exit 0\n"
        << "  sleep 0.1\n"
        << "done\n"
        << "exit 3\n";
    std::filesystem::permissions(worker_, std::filesystem::perms::owner_all);
    standby_ = testing::StartLoopbackServer();
    ASSERT_NE(standby_, nullptr);
  }

  std::unique_ptr<Subprocess> Agent(const std::string& endpoints) {
    return std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("muster"), "--nnodes=2",
                                 "--nproc-per-node=2", "--max-restarts=0",
                                 "--rdzv-backend=c10d",
                                 "--rdzv-endpoint=" + endpoints,
                                 "--rdzv-id=failover", "--no-python", worker_},
        testing::EnvWithoutLauncher());
  }

  std::string Status(const std::string& endpoints) {
    Subprocess status({BinPath("muster"), "status",
                       "--rdzv-endpoint=" + endpoints, "failover"},
                      testing::EnvWithoutLauncher());
    EXPECT_EQ(status.WaitOrKill(absl::Seconds(30)), 0) << status.Output();
    return status.Output();
  }

  // Runs the job on `endpoints` until its 4 workers started, calls
  // `fail_leader`, waits `election`, makes the standby lead, and checks that
  // the job re-forms on it without a worker restart and succeeds.
  void RunFailover(const std::string& endpoints,
                   const std::function<void()>& fail_leader,
                   absl::Duration election, const std::string& agent_says) {
    auto a = Agent(endpoints);
    auto b = Agent(endpoints);
    ASSERT_TRUE(testing::WaitUntil(
        [&] { return ReadLines(starts_).size() >= 4; }, absl::Seconds(60)))
        << a->Output() << b->Output();
    // `muster status` given standby,leader follows the standby to the leader.
    EXPECT_THAT(Status(endpoints), HasSubstr("failover"));
    // Some lease renewals first, so that the leases run from a steady state.
    absl::SleepFor(absl::Seconds(1));

    fail_leader();
    absl::SleepFor(election);
    standby_->Lead();
    // Both agents back, the round re-adopted as it ran.
    ASSERT_TRUE(testing::WaitUntil(
        [&] {
          v1::GetStatusResponse s = standby_->coordinator().Status("failover");
          return s.jobs_size() == 1 && s.jobs(0).state() == "RUNNING" &&
                 s.jobs(0).members_size() == 2;
        },
        absl::Seconds(20)))
        << a->Output() << b->Output();
    EXPECT_EQ(standby_->coordinator().Status("failover").jobs(0).round(), 1);
    EXPECT_THAT(Status(endpoints), HasSubstr("RUNNING"));

    std::ofstream(finish_) << "done\n";
    EXPECT_EQ(a->WaitOrKill(absl::Seconds(60)), 0) << a->Output();
    EXPECT_EQ(b->WaitOrKill(absl::Seconds(60)), 0) << b->Output();
    const std::vector<std::string> lines = ReadLines(starts_);
    std::map<std::string, int> per_rank;
    for (const std::string& l : lines) {
      std::vector<std::string> f = absl::StrSplit(l, ' ');
      ASSERT_EQ(f.size(), 5u) << l;
      ++per_rank[f[1]];
      // The workers' Store endpoint lists every replica, in the agent's order.
      EXPECT_EQ(f[4], endpoints) << l;
    }
    EXPECT_EQ(lines.size(), 4u) << "a worker started twice:\n"
                                << absl::StrJoin(lines, "\n") << "\n"
                                << a->Output() << b->Output();
    EXPECT_EQ(per_rank.size(), 4u);
    EXPECT_THAT(a->Output() + b->Output(), HasSubstr(agent_says));
    EXPECT_THAT(a->Output() + b->Output(),
                ::testing::Not(HasSubstr("lease fence")));
  }

  std::string dir_, starts_, finish_, worker_;
  std::unique_ptr<rendezvous::RendezvousServer> standby_;
};

TEST_F(FailoverE2eTest, ALeaderThatShutsDownRestartsNoWorker) {
  std::unique_ptr<rendezvous::RendezvousServer> leader =
      testing::StartLoopbackServer();
  ASSERT_NE(leader, nullptr);
  standby_->StandBy(standby_->address(), leader->address());
  RunFailover(
      absl::StrCat(standby_->address(), ",", leader->address()),
      [&] { leader->Shutdown(absl::Seconds(1)); }, absl::Seconds(1),
      "reconnected");
}

// A musterd process as the leader: SIGSTOP (frozen, its connections open) or
// SIGKILL (its connections reset), then the standby leads 2.5 s later, the
// longest an etcd election takes with its 2 s lease.
class FrozenOrKilledLeaderTest : public FailoverE2eTest,
                                 public ::testing::WithParamInterface<int> {};

TEST_P(FrozenOrKilledLeaderTest, RestartsNoWorkerAndTheJobSucceeds) {
  const int port = testing::FreePort();
  const std::string leader_at = absl::StrCat("127.0.0.1:", port);
  Subprocess musterd({BinPath("musterd"), "--listen=" + leader_at});
  ASSERT_TRUE(musterd.WaitForOutput("listening", absl::Seconds(30)))
      << musterd.Output();
  standby_->StandBy(standby_->address(), leader_at);
  const int sig = GetParam();
  RunFailover(
      absl::StrCat(standby_->address(), ",", leader_at),
      [&] { kill(musterd.pid(), sig); }, absl::Milliseconds(2500),
      sig == SIGSTOP ? "no answer for 4.5s" : "reconnected");
  musterd.Kill();
}

INSTANTIATE_TEST_SUITE_P(Signals, FrozenOrKilledLeaderTest,
                         ::testing::Values(SIGSTOP, SIGKILL),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(
                               info.param == SIGSTOP ? "SIGSTOP" : "SIGKILL");
                         });

}  // namespace
}  // namespace muster
