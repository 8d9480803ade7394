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
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/musterd.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tcp_listener.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::FreePort;
using ::muster::testing::LoopbackChannel;
using ::muster::testing::MakeJoin;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::RawSession;
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
  // (--nproc-per-nod would be an abbreviation, which argparse and muster
  // take.)
  Result r = RunMuster({"--nproc-per-nodes=4", "/bin/true"});
  EXPECT_EQ(r.rc, kExitConfigError) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unknown flag --nproc-per-nodes (did you "
                                  "mean --nproc-per-node?)"));
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

// Issue 11: one id grammar, [A-Za-z0-9._-]{1,128} (muster/common/ids.h). The
// launcher refuses a bad --rdzv-id before it connects (exit 2, the server
// never hears of it); the server refuses a bad id from any client with
// INVALID_ARGUMENT and stays up.
TEST(BadInputE2eTest, JobIdOutsideTheGrammarIsRefusedByLauncherAndServer) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  const std::string endpoint = "--rdzv-endpoint=" + server.endpoint();
  for (const std::string& id :
       {std::string("a/b"), std::string(129, 'x'), std::string("job 1")}) {
    Result r = RunMuster({"--nnodes=2", endpoint, "--rdzv-id=" + id,
                          "--no-python", "/bin/true"});
    EXPECT_EQ(r.rc, kExitConfigError) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--rdzv-id '" + id.substr(0, 64)));
    EXPECT_THAT(r.output, HasSubstr("[A-Za-z0-9._-]{1,128}"));
    EXPECT_THAT(r.output, HasSubstr("--rdzv-id=job-42"));
    EXPECT_LT(r.took, absl::Seconds(10));
  }
  // The server never heard of them: it lists no job.
  Subprocess status({BinPath("muster"), "status", endpoint, "--json"});
  ASSERT_EQ(status.WaitOrKill(kQuick), 0) << status.Output();
  EXPECT_THAT(status.Output(), HasSubstr("\"total_jobs\": \"0\""));

  // A client that skips the launcher's check: the server refuses the Join.
  for (const std::string& id :
       {std::string("a/b"), std::string(1 << 20, 'j')}) {
    RawSession session(LoopbackChannel(server.port()));
    v1::AgentMessage join;
    *join.mutable_join() = MakeJoin({.job_id = id, .node_id = "n"});
    ASSERT_TRUE(session.stream().Write(join));
    session.stream().WritesDone();
    grpc::Status s = session.Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message().substr(0, 300);
    EXPECT_THAT(s.error_message(), HasSubstr("[A-Za-z0-9._-]{1,128}"));
    EXPECT_LT(s.error_message().size(), 1000u);
  }
  // And is still up.
  Subprocess again({BinPath("muster"), "status", endpoint});
  EXPECT_EQ(again.WaitOrKill(kQuick), 0) << again.Output();
  EXPECT_THAT(again.Output(), HasSubstr(": 0 jobs"));
}

}  // namespace
}  // namespace muster
