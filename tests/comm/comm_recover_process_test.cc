// In-place recovery as processes, without an agent: the test plays the agent
// (a Store server on loopback, each worker's control directory and `round`
// file) for the `train` example. Three workers train; one is SIGKILLed; the
// two survivors print `recovered: ... of 2` in the same processes; a newcomer
// joins and the three finish with rank 0's `all 3 ranks agree on the
// parameters`. On shared memory (one host) and across "hosts"
// (MUSTER_HOST_ID, the TCP path).
#include <signal.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/comm/fake_agent.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::comm_testing::FakeAgent;
using ::muster::testing::BinPath;
using ::muster::testing::EnvWithoutLauncher;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;

class RecoverProcessTest : public ::testing::TestWithParam<bool> {
 protected:
  // Starts `train` as worker w: rank/world of round `round`, as the agent's
  // environment would say.
  std::unique_ptr<Subprocess> StartTrain(FakeAgent& agent, int w, int round,
                                         int rank, int world) {
    std::map<std::string, std::string> env = EnvWithoutLauncher();
    env["RANK"] = absl::StrCat(rank);
    env["WORLD_SIZE"] = absl::StrCat(world);
    env["LOCAL_RANK"] = absl::StrCat(rank);
    env["LOCAL_WORLD_SIZE"] = absl::StrCat(world);
    env["MUSTER_STORE_ENDPOINT"] = agent.endpoint();
    env["MUSTER_STORE_PREFIX"] = absl::StrCat("round", round);
    env["MUSTER_ROUND"] = absl::StrCat(round);
    env["MUSTER_RECOVERY"] = "in-place";
    env["MUSTER_CONTROL_DIR"] = agent.Dir(w);
    env["MUSTER_HOST_ID"] = GetParam() ? "one-host" : absl::StrCat("host", w);
    env["MUSTER_COMM_TIMEOUT"] = "60";
    return std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("train"), "--epochs=600",
                                 "--step-ms=5"},
        env);
  }
};

TEST_P(RecoverProcessTest, ShrinkThenGrowInTheSameProcesses) {
  FakeAgent agent;
  ASSERT_TRUE(agent.ok());
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int w = 0; w < 3; ++w) {
    agent.Write(w, true, 1, w, 3);
    workers.push_back(StartTrain(agent, w, 1, w, 3));
  }
  for (int w = 0; w < 3; ++w) {
    ASSERT_TRUE(workers[w]->WaitForOutput(
        absl::StrCat("start: rank ", w, " of 3 pid ", workers[w]->pid()),
        absl::Seconds(30)))
        << workers[w]->Output();
    EXPECT_TRUE(std::filesystem::exists(agent.Dir(w) + "/hello"));
  }
  // Kill -9 of worker 1, as a lost node would be.
  workers[1]->Signal(SIGKILL);
  EXPECT_EQ(workers[1]->WaitOrKill(absl::Seconds(10)), 128 + SIGKILL);
  agent.Write(0, false, 1, 0, 3, "node b (rank 1) lost");
  agent.Write(2, false, 1, 2, 3, "node b (rank 1) lost");
  agent.Write(0, true, 2, 0, 2);
  agent.Write(2, true, 2, 1, 2);
  EXPECT_TRUE(workers[0]->WaitForOutput("recovered: rank 0 of 2 (was 0 of 3)",
                                        absl::Seconds(30)))
      << workers[0]->Output();
  EXPECT_TRUE(workers[2]->WaitForOutput("recovered: rank 1 of 2 (was 2 of 3)",
                                        absl::Seconds(30)))
      << workers[2]->Output();

  // A newcomer: the survivors see the round change between steps.
  agent.Write(0, false, 2, 0, 2, "a newcomer waits");
  agent.Write(2, false, 2, 1, 2, "a newcomer waits");
  agent.Write(0, true, 3, 0, 3);
  agent.Write(2, true, 3, 1, 3);
  agent.Write(3, true, 3, 2, 3);
  workers.push_back(StartTrain(agent, 3, 3, 2, 3));
  for (int w : {0, 2, 3}) {
    EXPECT_EQ(workers[w]->WaitOrKill(absl::Seconds(120)), 0)
        << "worker " << w << ":\n"
        << workers[w]->Output();
  }
  EXPECT_THAT(workers[0]->Output(),
              HasSubstr("recovered: rank 0 of 3 (was 0 of 2)"));
  EXPECT_THAT(workers[2]->Output(),
              HasSubstr("recovered: rank 1 of 3 (was 1 of 2)"));
  EXPECT_THAT(workers[3]->Output(), HasSubstr("start: rank 2 of 3"));
  EXPECT_THAT(workers[0]->Output(),
              HasSubstr("all 3 ranks agree on the parameters"));
  // One start each: nothing was started again.
  for (int w : {0, 2}) {
    EXPECT_EQ(testing::LinesWith(workers[w]->Output(), "start:").size(), 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, RecoverProcessTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SharedMemory" : "AcrossHosts";
                         });

}  // namespace
}  // namespace muster
