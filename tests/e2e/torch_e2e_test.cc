// muster.torch (issue 27) with real torch processes under the real launcher:
// the default process group on musterd's Store under --recovery=restart (no
// worker hosts a TCPStore), across a restart, and on a TLS musterd that
// requires a token (the workers get their round's credential). In-place
// recovery with real agents: InPlace* below.
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/musterd.h"
#include "tests/testing/ports.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::EnvWithoutLauncher;
using ::muster::testing::FreePort;
using ::muster::testing::LinesWith;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::SourceDir;
using ::muster::testing::Subprocess;
using ::muster::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPython[] = "/usr/bin/python3";

std::string Worker() {
  return SourceDir() + "/tests/workers/torch_allreduce.py";
}

// Every line "rank R of W: allreduce S ..." of the output, as (R, W, S).
std::set<std::tuple<int, int, int>> Allreduces(const std::string& out) {
  static const std::regex kLine(R"(rank (\d+) of (\d+): allreduce (\d+))");
  std::set<std::tuple<int, int, int>> seen;
  for (const std::string& line : LinesWith(out, "allreduce")) {
    std::smatch m;
    if (std::regex_search(line, m, kLine)) {
      seen.insert({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])});
    }
  }
  return seen;
}

class TorchE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kPython)) GTEST_SKIP() << "no " << kPython;
    Subprocess probe({kPython, "-c", "import torch.distributed, grpc"});
    if (probe.WaitOrKill(absl::Seconds(120)) != 0) {
      GTEST_SKIP() << "python3-torch or python3-grpcio is not installed: "
                   << probe.Output();
    }
  }

  // The environment of a launcher: ctest's, without a surrounding job's
  // variables, with PYTHON_EXEC and no PYTHONPATH (the launcher adds its
  // package itself).
  static std::map<std::string, std::string> LauncherEnv() {
    std::map<std::string, std::string> env = EnvWithoutLauncher();
    env["PYTHON_EXEC"] = kPython;
    env["PYTHONPATH"] = "";
    env["OMP_NUM_THREADS"] = "1";
    return env;
  }
};

TEST_F(TorchE2eTest, InitProcessGroupUnderRestartModeOnFourWorkers) {
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=4",
                "--prefix-output", Worker()},
               LauncherEnv());
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(240)), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_EQ(Allreduces(out),
            (std::set<std::tuple<int, int, int>>{
                {0, 4, 10}, {1, 4, 10}, {2, 4, 10}, {3, 4, 10}}))
      << out;
  EXPECT_EQ(LinesWith(out, "store MusterStore recovery False").size(), 4u)
      << out;
}

TEST_F(TorchE2eTest, ARestartFormsTheGroupAgainOnTheNextRound) {
  // Rank 1 exits 3 after the first attempt's allreduce: the agent restarts
  // both workers, which form the group on round 2's namespace.
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=2",
                "--max-restarts=1", Worker(), "--fail-once-rank=1"},
               LauncherEnv());
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(240)), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_EQ(LinesWith(out, "of 2: allreduce 3 store MusterStore").size(), 4u)
      << out;
}

TEST_F(TorchE2eTest, TlsMusterdWithATokenGivesWorkersTheirCredential) {
  const std::string dir = MakeTempDir("torch_e2e_tls");
  absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir);
  ASSERT_TRUE(pki.ok()) << pki.status();
  constexpr char kToken[] = "torch-e2e-job-token-2b9d7e4f6a1c3e5d";
  WriteFile(dir + "/admin.token", "torch-e2e-admin-token-8c7b6a5d4e3f\n", 0600);
  const int port = FreePort();
  MusterdProcess musterd(
      port, {"--tls-cert=" + pki->server_cert, "--tls-key=" + pki->server_key,
             "--require-token", "--admin-token-file=" + dir + "/admin.token"});
  ASSERT_TRUE(musterd.ready()) << musterd.proc().Output();
  std::map<std::string, std::string> env = LauncherEnv();
  env["MUSTER_RDZV_TOKEN"] = kToken;
  Subprocess p(
      {BinPath("muster"), "--nnodes=1", "--nproc-per-node=2",
       "--rdzv-backend=c10d", "--rdzv-endpoint=" + LoopbackEndpoint(port),
       "--rdzv-id=torchtls", "--rdzv-conf=tls_ca=" + pki->ca_cert, Worker()},
      env);
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(240)), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_EQ(Allreduces(out),
            (std::set<std::tuple<int, int, int>>{{0, 2, 3}, {1, 2, 3}}))
      << out;
  EXPECT_THAT(out, Not(HasSubstr(kToken)));
}

}  // namespace
}  // namespace muster
