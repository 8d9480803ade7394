// A paused leader never acts (issue 35): the scenario that restarted a
// running job's workers on main 1484feb, repeated. Two real musterd replicas
// (A, B) over a real 3-member etcd cluster on loopback, a two-node job of 2
// workers each (`muster --rdzv-endpoint=A,B`). Each cycle:
//   1. kill -9 of the leader; the other leads and re-adopts the round; the
//      killed one is restarted and stands by;
//   2. SIGSTOP of the new leader; the standby takes over (the agents follow
//      it, one sooner than the other);
//   3. SIGCONT of the paused one, which wakes with open streams to agents and
//      must decide nothing (no node lost, no Restart sent) before it finds
//      its lease gone and exits 75; it is restarted and stands by.
// Checks: no worker ever restarts (one start per rank), both agents exit 0
// when the job finishes, and the paused replica's log shows that it acted on
// nothing. MUSTER_PAUSED_LEADER_CYCLES (default 1) repeats the cycle:
// bench/paused_leader.sh runs it 10 times.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/etcd.h"
#include "tests/testing/files.h"
#include "tests/testing/http.h"
#include "tests/testing/musterd.h"
#include "tests/testing/replicas.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/wait.h"

namespace muster::testing {
namespace {

using ::testing::HasSubstr;

int Cycles() {
  const char* v = std::getenv("MUSTER_PAUSED_LEADER_CYCLES");
  int n = 1;
  if (v != nullptr && (!absl::SimpleAtoi(v, &n) || n < 1 || n > 100)) n = 1;
  return n;
}

class PausedLeaderE2eTest : public TwoReplicasOnEtcd {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("paused-leader");
    starts_ = dir_ + "/starts";
    finish_ = dir_ + "/finish";
    worker_ = dir_ + "/worker.sh";
    std::ofstream(worker_) << "#!/bin/bash\n"
                           << "echo \"start $RANK $MUSTER_ROUND $$\" >> \""
                           << starts_ << "\"\n"
                           << "for i in $(seq 1 6000); do\n"
                           << "  [ -e \"" << finish_ << "\" ] && exit 0\n"
                           << "  sleep 0.1\n"
                           << "done\n"
                           << "exit 3\n";
    std::filesystem::permissions(worker_, std::filesystem::perms::owner_all);
    TwoReplicasOnEtcd::SetUp();
  }

  std::unique_ptr<Subprocess> Agent() {
    return std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("muster"), "--nnodes=2",
                                 "--nproc-per-node=2", "--max-restarts=0",
                                 "--rdzv-backend=c10d",
                                 "--rdzv-endpoint=" + replicas_[0]->endpoint() +
                                     "," + replicas_[1]->endpoint(),
                                 "--rdzv-id=ha", "--no-python", worker_},
        EnvWithoutLauncher());
  }

  // The job's state as the leader `i` reports it on /metrics is not enough
  // (it counts, it does not say RUNNING): `muster status` on the leader.
  bool RunningOn(int i) {
    Subprocess status({BinPath("muster"), "status",
                       "--rdzv-endpoint=" + replicas_[i]->endpoint(), "ha"},
                      EnvWithoutLauncher());
    if (status.WaitOrKill(absl::Seconds(20)) != 0) return false;
    const std::string out = status.Output();
    return absl::StrContains(out, "RUNNING") &&
           !absl::StrContains(out, "waiting");
  }

  std::string dir_, starts_, finish_, worker_;
};

TEST_F(PausedLeaderE2eTest, APausedLeaderThatResumesRestartsNoWorker) {
  auto a = Agent();
  auto b = Agent();
  auto all = [&] {
    return Logs() + "--- agent a ---\n" + a->Output() + "--- agent b ---\n" +
           b->Output() + "--- worker starts ---\n" +
           absl::StrJoin(ReadLines(starts_), "\n");
  };
  ASSERT_TRUE(WaitUntil([&] { return ReadLines(starts_).size() >= 4; },
                        absl::Seconds(60)))
      << all();

  const int cycles = Cycles();
  int deposed = 0;       // paused leaders that exited 75 on waking
  int held_streams = 0;  // their streams that ended while unconfirmed
  for (int cycle = 1; cycle <= cycles; ++cycle) {
    SCOPED_TRACE(absl::StrCat("cycle ", cycle, " of ", cycles));
    const int first = Leading();
    ASSERT_GE(first, 0) << all();
    const int second = 1 - first;
    ASSERT_TRUE(WaitUntil([&] { return RunningOn(first); }, absl::Seconds(30)))
        << all();

    // 1. kill -9 of the leader: the other leads and re-adopts the round.
    replicas_[first]->proc().Kill();
    ASSERT_TRUE(
        WaitUntil([&] { return Leading() == second; }, absl::Seconds(20)))
        << all();
    ASSERT_TRUE(replicas_[first]->Start()) << all();
    ASSERT_TRUE(WaitUntil([&] { return RunningOn(second); }, absl::Seconds(30)))
        << all();

    // 2. SIGSTOP of the new leader: the restarted one takes over.
    const size_t output_before = replicas_[second]->proc().Output().size();
    replicas_[second]->proc().Signal(SIGSTOP);
    const bool took_over =
        WaitUntil([&] { return Leading() == first; }, absl::Seconds(30));
    // Some agents move now, others still hold their stream to the paused
    // one: the case the issue saw.
    absl::SleepFor(absl::Milliseconds(500));

    // 3. SIGCONT: it must find itself deposed having acted on nothing.
    replicas_[second]->proc().Signal(SIGCONT);
    ASSERT_TRUE(took_over) << all();
    const std::optional<int> code =
        replicas_[second]->proc().Wait(absl::Seconds(30));
    ASSERT_TRUE(code.has_value()) << "the paused leader kept running\n"
                                  << all();
    EXPECT_EQ(*code, 75) << all();
    deposed += *code == 75;
    const std::string woke =
        replicas_[second]->proc().Output().substr(output_before);
    for (size_t at = woke.find("could not confirm its leadership");
         at != std::string::npos;
         at = woke.find("could not confirm its leadership", at + 1)) {
      ++held_streams;
    }
    EXPECT_THAT(woke, ::testing::Not(HasSubstr("restarting round")))
        << "the resumed leader acted:\n"
        << woke;
    EXPECT_THAT(woke, ::testing::Not(HasSubstr(" lost (")))
        << "the resumed leader acted:\n"
        << woke;
    ASSERT_TRUE(replicas_[second]->Start()) << all();
    ASSERT_TRUE(WaitUntil([&] { return RunningOn(first); }, absl::Seconds(30)))
        << all();
    ASSERT_EQ(ReadLines(starts_).size(), 4u)
        << "a worker restarted in cycle " << cycle << "\n"
        << all();
  }

  std::ofstream(finish_) << "done\n";
  EXPECT_EQ(a->WaitOrKill(absl::Seconds(60)), 0) << all();
  EXPECT_EQ(b->WaitOrKill(absl::Seconds(60)), 0) << all();
  std::map<std::string, int> per_rank;
  for (const std::string& l : ReadLines(starts_)) {
    std::vector<std::string> f = absl::StrSplit(l, ' ');
    ASSERT_EQ(f.size(), 4u) << l;
    ++per_rank[f[1]];
  }
  EXPECT_EQ(per_rank.size(), 4u) << all();
  for (const auto& [rank, n] : per_rank) {
    EXPECT_EQ(n, 1) << "rank " << rank << " started " << n << " times\n"
                    << all();
  }
  std::cout << "paused-leader cycles: " << cycles
            << ", worker starts: " << ReadLines(starts_).size()
            << " (4 ranks), paused leaders deposed: " << deposed
            << ", their streams ended while unconfirmed: " << held_streams
            << "\n";
}

}  // namespace
}  // namespace muster::testing
