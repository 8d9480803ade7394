// libmuster_comm as processes: under muster (env://, the launcher's store)
// every collective x dtype x op, and a rank SIGKILLed in the middle of an
// AllReduce, with and without the launcher; the survivors must name the dead
// rank within 10 s. The shared-memory transport as processes: a rank killed
// while the others wait in the segment, and two "hosts" of two ranks
// (MUSTER_HOST_ID) running every collective.
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/comm/comm_ranks.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::comm_testing::FailedAfterMs;
using ::muster::comm_testing::StartOnServedPort;
using ::muster::comm_testing::StartTcpWorkers;
using ::muster::testing::BinPath;
using ::muster::testing::EnvWithoutLauncher;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;

TEST(ProcessTest, EveryCollectiveUnderMusterAcrossThreeRanks) {
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=3",
                "--prefix-output", "--no-python", BinPath("comm_worker"),
                "--mode=check"},
               EnvWithoutLauncher());
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(300)), 0) << p.Output();
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(p.Output(), HasSubstr(absl::StrCat("[rank", r, "]:rank ", r,
                                                   "/3: all collectives OK")))
        << p.Output();
  }
}

TEST(ProcessTest, ARankKilledMidAllReduceIsNamedUnderMuster) {
  const absl::Time start = absl::Now();
  Subprocess p(
      {BinPath("muster"), "--standalone", "--nproc-per-node=3", "--no-python",
       BinPath("comm_worker"), "--mode=kill", "--victim=1"},
      EnvWithoutLauncher());
  const int rc = p.WaitOrKill(absl::Seconds(120));
  const std::string out = p.Output();
  EXPECT_NE(rc, 0) << "a worker was killed: the job fails\n" << out;
  EXPECT_THAT(out, HasSubstr("victim: SIGKILL now"));
  for (int r : {0, 2}) {
    const int ms = FailedAfterMs(out, r);
    EXPECT_GE(ms, 0) << "rank " << r << " did not report\n" << out;
    EXPECT_LT(ms, 10000) << out;
  }
  // The survivors name the dead rank, whichever told them first: their own
  // connection to it, or (if the launcher was quicker) the round's end.
  EXPECT_THAT(out, HasSubstr("peer rank 1")) << out;
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

TEST(ProcessTest, ARankKilledMidAllReduceIsNamedWithoutALauncher) {
  std::vector<std::unique_ptr<Subprocess>> procs =
      StartTcpWorkers(4, {"--mode=kill", "--victim=2"});
  EXPECT_EQ(procs[2]->WaitOrKill(absl::Seconds(60)), 128 + 9)
      << procs[2]->Output();
  for (int r : {0, 1, 3}) {
    // Exit 0: the error named "peer rank 2" within 10 s (comm_worker checks).
    EXPECT_EQ(procs[r]->WaitOrKill(absl::Seconds(60)), 0) << procs[r]->Output();
    const std::string out = procs[r]->Output();
    EXPECT_THAT(out, HasSubstr("ABORTED"));
    EXPECT_THAT(out, HasSubstr("peer rank 2"));
    EXPECT_THAT(out, HasSubstr("was lost"));
    const int ms = FailedAfterMs(out, r);
    EXPECT_GE(ms, 0) << out;
    EXPECT_LT(ms, 10000) << out;
  }
}

// The shared-memory allreduce, forced: a rank SIGKILLed mid-collective is
// named by every survivor within 10 s (whichever sees it first: the peer
// monitor's connection, or the segment's liveness check), and nothing hangs.
TEST(ProcessTest, ARankKilledMidSharedMemoryAllReduceIsNamed) {
  std::vector<std::unique_ptr<Subprocess>> procs = StartTcpWorkers(
      3, {"--mode=kill", "--victim=1"}, {{"MUSTER_GLOO_ALGORITHM", "shm"}});
  EXPECT_EQ(procs[1]->WaitOrKill(absl::Seconds(60)), 128 + 9)
      << procs[1]->Output();
  for (int r : {0, 2}) {
    EXPECT_EQ(procs[r]->WaitOrKill(absl::Seconds(60)), 0) << procs[r]->Output();
    const std::string out = procs[r]->Output();
    EXPECT_THAT(out, HasSubstr("ABORTED"));
    EXPECT_THAT(out, HasSubstr("peer rank 1"));
    const int ms = FailedAfterMs(out, r);
    EXPECT_GE(ms, 0) << out;
    EXPECT_LT(ms, 10000) << out;
  }
}

// Two "hosts" of two ranks on loopback: shared memory inside each, Gloo
// between the two leaders; every collective against the reference.
TEST(ProcessTest, TwoHostsOfTwoRanksRunEveryCollective) {
  std::vector<std::unique_ptr<Subprocess>> procs =
      StartOnServedPort(4, [](int r, int port) {
        std::map<std::string, std::string> env = EnvWithoutLauncher();
        env["MUSTER_HOST_ID"] = r < 2 ? "node-a" : "node-b";
        env["MUSTER_GLOO_ALGORITHM"] = "shm";
        return std::make_unique<Subprocess>(
            std::vector<std::string>{
                BinPath("comm_worker"),
                absl::StrCat("--init=tcp://127.0.0.1:", port),
                absl::StrCat("--rank=", r), "--world-size=4", "--mode=check"},
            env);
      });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(procs[r]->WaitOrKill(absl::Seconds(300)), 0)
        << procs[r]->Output();
    EXPECT_THAT(procs[r]->Output(),
                HasSubstr(absl::StrCat("rank ", r, "/4: all collectives OK")));
  }
}

// Two ranks that claim one host but do not share /dev/shm (as containers with
// the same host name and boot id may): rank 1 runs in a mount namespace with
// a /dev/shm of its own, cannot open rank 0's segment, and both ranks fall
// back to Gloo together (a warning names why) and still pass every check.
TEST(ProcessTest, ARankThatCannotMapTheSegmentMakesEveryRankUseGloo) {
  if (geteuid() != 0 || access("/usr/bin/unshare", X_OK) != 0) {
    GTEST_SKIP() << "needs root and /usr/bin/unshare for a private /dev/shm";
  }
  std::map<std::string, std::string> env = EnvWithoutLauncher();
  env["MUSTER_HOST_ID"] = "one-host";
  std::vector<std::unique_ptr<Subprocess>> procs =
      StartOnServedPort(2, [&](int r, int port) {
        const std::string init = absl::StrCat("tcp://127.0.0.1:", port);
        std::vector<std::string> argv = {
            BinPath("comm_worker"), "--init=" + init,
            absl::StrCat("--rank=", r), "--world-size=2", "--mode=check"};
        if (r == 1) {
          argv.insert(
              argv.begin(),
              {"/usr/bin/unshare", "--mount", "--propagation", "private", "sh",
               "-c", "mount -t tmpfs tmpfs /dev/shm && exec \"$0\" \"$@\""});
        }
        return std::make_unique<Subprocess>(std::move(argv), env);
      });
  Subprocess& rank0 = *procs[0];
  Subprocess& rank1 = *procs[1];
  EXPECT_EQ(rank1.WaitOrKill(absl::Seconds(300)), 0) << rank1.Output();
  EXPECT_EQ(rank0.WaitOrKill(absl::Seconds(300)), 0) << rank0.Output();
  EXPECT_THAT(rank0.Output(), HasSubstr("rank 0/2: all collectives OK"));
  EXPECT_THAT(rank1.Output(), HasSubstr("rank 1/2: all collectives OK"));
  EXPECT_THAT(rank0.Output(), HasSubstr("not using shared memory: rank 1"))
      << rank0.Output();
}

}  // namespace
}  // namespace muster
