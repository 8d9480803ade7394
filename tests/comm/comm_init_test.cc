// Init methods without the launcher, as separate processes (comm_worker):
// tcp://HOST:PORT and env:// with MASTER_ADDR/MASTER_PORT (rank 0 serves the
// store), file:///PATH (including a stale file left by a killed run, and a file
// still in use by another run), and the errors of bad init methods.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/comm/communicator.h"
#include "tests/comm/comm_ranks.h"
#include "tests/testing/subprocess.h"

namespace muster::comm {
namespace {

using ::muster::comm_testing::StartOnServedPort;
using ::muster::comm_testing::StartTcpWorkers;
using ::muster::testing::BinPath;
using ::muster::testing::EnvWithoutLauncher;
using ::muster::testing::MakeTempDir;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;

std::vector<std::unique_ptr<Subprocess>> StartRanks(
    int n, const std::string& init, const std::string& mode,
    std::map<std::string, std::string> extra_env = {}) {
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int r = 0; r < n; ++r) {
    std::map<std::string, std::string> env = EnvWithoutLauncher();
    for (const auto& [k, v] : extra_env) env[k] = v;
    procs.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("comm_worker"), "--init=" + init,
                                 absl::StrCat("--rank=", r),
                                 absl::StrCat("--world-size=", n),
                                 "--mode=" + mode, "--timeout=60"},
        env));
  }
  return procs;
}

TEST(InitTest, TcpEveryCollectiveAcrossThreeProcesses) {
  auto procs = StartTcpWorkers(3, {"--mode=check", "--timeout=60"});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(procs[r]->WaitOrKill(absl::Seconds(240)), 0)
        << procs[r]->Output();
    EXPECT_THAT(procs[r]->Output(),
                HasSubstr(absl::StrCat("rank ", r, "/3: all collectives OK")));
  }
}

TEST(InitTest, EnvWithoutTheLauncherUsesMasterAddrAndPort) {
  std::vector<std::unique_ptr<Subprocess>> procs =
      StartOnServedPort(2, [](int r, int port) {
        std::map<std::string, std::string> e = EnvWithoutLauncher();
        e["MASTER_ADDR"] = "127.0.0.1";
        e["MASTER_PORT"] = absl::StrCat(port);
        e["WORLD_SIZE"] = "2";
        e["RANK"] = absl::StrCat(r);
        return std::make_unique<Subprocess>(
            std::vector<std::string>{BinPath("comm_worker"), "--init=env://",
                                     "--mode=init"},
            e);
      });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(procs[r]->WaitOrKill(absl::Seconds(60)), 0) << procs[r]->Output();
    EXPECT_THAT(procs[r]->Output(),
                HasSubstr(absl::StrCat("rank ", r, "/2: up")));
  }
}

TEST(InitTest, FileEveryCollectiveAndTheFileIsRemovedAfterwards) {
  const std::string path = MakeTempDir("filestore") + "/store";
  auto procs = StartRanks(3, "file://" + path, "check");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(procs[r]->WaitOrKill(absl::Seconds(240)), 0)
        << procs[r]->Output();
  }
  EXPECT_FALSE(std::filesystem::exists(path))
      << "the last rank removes the store file";
}

TEST(InitTest, AStaleFileFromAKilledRunIsClearedWithAWarning) {
  const std::string path = MakeTempDir("stale") + "/store";
  {
    // A run of 2 whose rank 0 is killed while it waits for rank 1: the file
    // stays behind with rank 0 registered and its keys written.
    Subprocess killed({BinPath("comm_worker"), "--init=file://" + path,
                       "--rank=0", "--world-size=2", "--mode=init"},
                      EnvWithoutLauncher());
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!std::filesystem::exists(path) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    absl::SleepFor(absl::Milliseconds(300));
    killed.Kill();
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  auto procs = StartRanks(2, "file://" + path, "init");
  std::string all;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(procs[r]->WaitOrKill(absl::Seconds(60)), 0) << procs[r]->Output();
    all += procs[r]->Output();
  }
  EXPECT_THAT(all, HasSubstr("was left behind by an earlier run whose ranks "
                             "are gone (rank 0 (pid"));
  EXPECT_THAT(all, HasSubstr("clearing it"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(InitTest, AFileInUseByAnotherRunIsRefusedNamingTheProcess) {
  const std::string path = MakeTempDir("busy") + "/store";
  // A run of 2 whose rank 0 is alive and waiting for its rank 1.
  Subprocess first({BinPath("comm_worker"), "--init=file://" + path, "--rank=0",
                    "--world-size=2", "--mode=init", "--timeout=60"},
                   EnvWithoutLauncher());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!std::filesystem::exists(path) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::SleepFor(absl::Milliseconds(200));
  // Another job's rank 0 with the same path.
  Subprocess second({BinPath("comm_worker"), "--init=file://" + path,
                     "--rank=0", "--world-size=2", "--mode=init"},
                    EnvWithoutLauncher());
  EXPECT_EQ(second.WaitOrKill(absl::Seconds(30)), 2) << second.Output();
  EXPECT_THAT(second.Output(), HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(second.Output(),
              HasSubstr(absl::StrCat("is in use: rank 0 (pid ", first.pid(),
                                     ") is still running")));
  first.Kill();
}

TEST(InitTest, BadInitMethodsSayWhatIsExpected) {
  auto bad = Communicator::Init("nfs://x", 0, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("use env://, tcp://HOST:PORT or file:///PATH"));
  auto relative = Communicator::Init("file://relative/path", 0, 1);
  EXPECT_EQ(relative.status().code(), absl::StatusCode::kInvalidArgument);
  auto no_port = Communicator::Init("tcp://localhost", 0, 1);
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  unsetenv("RANK");
  auto no_rank = Communicator::Init("tcp://127.0.0.1:1");
  EXPECT_EQ(no_rank.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_rank.status().message(), HasSubstr("RANK is not set"));
}

TEST(InitTest, FileInitWithOneRankInProcess) {
  const std::string path = MakeTempDir("single") + "/store";
  {
    auto comm = Communicator::Init("file://" + path, 0, 1);
    ASSERT_TRUE(comm.ok()) << comm.status();
    double x = 2.5;
    ASSERT_TRUE(
        (*comm)->AllReduce(&x, 1, DataType::kFloat64, ReduceOp::kAvg).ok());
    EXPECT_EQ(x, 2.5);
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

// The digest a rank of `comm_worker --mode=agree` printed, after checking
// that it ran on `backend`.
std::string AgreeDigest(const Subprocess& p, int r, int n,
                        const std::string& backend) {
  const std::string out = p.Output();
  const std::string ok =
      absl::StrCat("rank ", r, "/", n, " (", backend, "): agree OK, digest ");
  const size_t at = out.find(ok);
  if (at == std::string::npos) return "no '" + ok + "' in: " + out;
  return out.substr(at + ok.size(), 16);
}

// A job whose ranks cannot share a Gloo mesh (Linux and Windows ranks; here
// one rank asks for MUSTER_COMM_MESH=direct) runs on libmuster_comm's own
// mesh, with the same results, bit for bit, as Gloo's; what it lacks is
// refused naming why.
TEST(InitTest, RanksThatCannotShareAGlooMeshRunOnTheDirectMesh) {
  const std::string dir = MakeTempDir("mesh");
  std::vector<std::unique_ptr<Subprocess>> direct;
  for (int r = 0; r < 3; ++r) {
    std::map<std::string, std::string> env = EnvWithoutLauncher();
    env["MUSTER_SHM"] = "0";
    if (r == 1) env["MUSTER_COMM_MESH"] = "direct";
    direct.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("comm_worker"),
                                 "--init=file://" + dir + "/direct",
                                 absl::StrCat("--rank=", r), "--world-size=3",
                                 "--mode=agree", "--timeout=60"},
        env));
  }
  auto gloo =
      StartRanks(3, "file://" + dir + "/gloo", "agree", {{"MUSTER_SHM", "0"}});
  std::string digest;
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(direct[r]->WaitOrKill(absl::Seconds(240)), 0)
        << direct[r]->Output();
    ASSERT_EQ(gloo[r]->WaitOrKill(absl::Seconds(240)), 0) << gloo[r]->Output();
    if (r == 0) digest = AgreeDigest(*gloo[r], r, 3, "gloo");
    EXPECT_EQ(AgreeDigest(*gloo[r], r, 3, "gloo"), digest);
    EXPECT_EQ(AgreeDigest(*direct[r], r, 3, "direct"), digest);
  }
  EXPECT_THAT(direct[0]->Output(),
              HasSubstr("cannot share a Gloo mesh (rank 0: gloo-TCP, rank 1: "
                        "direct, rank 2: gloo-TCP)"));

  // In process: what the direct mesh does not run is refused, saying why.
  ::setenv("MUSTER_COMM_MESH", "direct", 1);
  absl::StatusOr<std::unique_ptr<Communicator>> one =
      Communicator::Init("file://" + dir + "/one", 0, 1);
  ::setenv("MUSTER_COMM_MESH", "sideways", 1);
  absl::StatusOr<std::unique_ptr<Communicator>> bad =
      Communicator::Init("file://" + dir + "/bad", 0, 1);
  ::unsetenv("MUSTER_COMM_MESH");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->backend_name(), "direct");
  float x[2] = {1, 2};
  float y[1] = {0};
  absl::Status s =
      (*one)->ReduceScatter(x, y, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), HasSubstr("ReduceScatter cannot run: the ranks "
                                     "cannot share a Gloo mesh "
                                     "(MUSTER_COMM_MESH=direct)"));
  double z = 2.5;  // The refusal did not break the communicator.
  EXPECT_TRUE(
      (*one)->AllReduce(&z, 1, DataType::kFloat64, ReduceOp::kSum).ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("MUSTER_COMM_MESH='sideways' is not auto or direct"));
}

}  // namespace
}  // namespace muster::comm
