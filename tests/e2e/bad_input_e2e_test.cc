// Bad input to the launcher and the daemon: each gets a clear message that
// names the problem and a non-zero exit within seconds. Never a hang, never a
// silent success.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tcp_listener.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::FreePort;
using ::muster::testing::MakeTempDir;
using ::muster::testing::Subprocess;
using ::muster::testing::TcpListener;
using ::testing::HasSubstr;

constexpr int kExitConfigError = 2;
constexpr int kExitUnavailable = 3;
constexpr absl::Duration kQuick = absl::Seconds(15);

struct Result {
  int rc;
  std::string output;
  absl::Duration took;
};

Result RunMuster(std::vector<std::string> flags) {
  std::vector<std::string> argv = {BinPath("muster")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::Time start = absl::Now();
  Subprocess p(argv);
  int rc = p.WaitOrKill(kQuick);
  return {rc, p.Output(), absl::Now() - start};
}

TEST(BadInputE2eTest, UnknownFlagIsNamed) {
  Result r = RunMuster({"--nproc-per-nod=4", "/bin/true"});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--nproc-per-nod"));
}

TEST(BadInputE2eTest, MalformedNprocAndNnodesAreNamed) {
  Result r = RunMuster({"--nproc-per-node=abc", "/bin/true"});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr("abc"));
  r = RunMuster({"--nnodes=3:2", "/bin/true"});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr("3:2"));
}

TEST(BadInputE2eTest, MissingProgramIsNamed) {
  Result r = RunMuster({"--standalone", "--no-python", "/no/such/program"});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/no/such/program"));
  EXPECT_LT(r.took, absl::Seconds(10));
}

TEST(BadInputE2eTest, NonExecutableProgramIsNamed) {
  std::string path = MakeTempDir("noexec") + "/train.exe";
  std::ofstream(path) << "not a program\n";
  chmod(path.c_str(), 0644);
  Result r = RunMuster({"--standalone", "--no-python", path});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr(path));
  EXPECT_THAT(r.output, HasSubstr("executable"));
}

TEST(BadInputE2eTest, EndpointWithNothingListeningIsNamed) {
  std::string endpoint = absl::StrCat("127.0.0.1:", FreePort());
  Result r = RunMuster(
      {"--nnodes=2", "--rdzv-endpoint=" + endpoint, "--rdzv-id=nobody",
       "--rdzv-conf=is_host=0,connect_timeout=2", "--no-python", "/bin/true"});
  EXPECT_EQ(r.rc, kExitUnavailable) << r.output;
  EXPECT_THAT(r.output, HasSubstr(endpoint));
  EXPECT_LT(r.took, absl::Seconds(10));
}

TEST(BadInputE2eTest, TakenPortIsNamedWithItsHolder) {
  TcpListener held("0.0.0.0");  // nobody else can listen on its port
  ASSERT_TRUE(held.ok());
  Result r =
      RunMuster({"--nnodes=2", "--node-rank=0", "--master-addr=127.0.0.1",
                 absl::StrCat("--rdzv-endpoint=127.0.0.1:", held.port()),
                 "--no-python", "/bin/true"});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat(held.port())));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("pid ", getpid())));

  std::vector<std::string> argv = {
      BinPath("musterd"), absl::StrCat("--listen=0.0.0.0:", held.port())};
  Subprocess d(argv);
  int rc = d.WaitOrKill(kQuick);
  EXPECT_NE(rc, 0) << d.Output();
  EXPECT_NE(rc, -1) << "musterd hung on a taken port";
  EXPECT_THAT(d.Output(), HasSubstr(absl::StrCat(held.port())));
}

TEST(BadInputE2eTest, JobIdJoinedWithAnotherNodeCountIsRefused) {
  int port = FreePort();
  Subprocess server(
      {BinPath("musterd"), absl::StrCat("--listen=127.0.0.1:", port)});
  ASSERT_TRUE(server.WaitForOutput("listening", absl::Seconds(20)))
      << server.Output();
  std::string endpoint = absl::StrCat("--rdzv-endpoint=127.0.0.1:", port);
  Subprocess first({BinPath("muster"), "--nnodes=2", endpoint,
                    "--rdzv-id=sized", "--no-python", "/bin/sleep", "30"});
  ASSERT_TRUE(first.WaitForOutput("waiting for nodes", absl::Seconds(20)))
      << first.Output();
  Result r = RunMuster(
      {"--nnodes=3", endpoint, "--rdzv-id=sized", "--no-python", "/bin/true"});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr("sized"));
  EXPECT_THAT(r.output, HasSubstr("2"));
  EXPECT_THAT(r.output, HasSubstr("3"));
}

}  // namespace
}  // namespace muster
