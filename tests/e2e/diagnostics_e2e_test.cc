// Health and diagnostics end to end: `muster status` against a live job,
// musterd's HTTP probes and Prometheus metrics read by a real HTTP client, and
// the worker watchdog catching a worker that stopped making progress (SIGSTOP).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/http.h"
#include "tests/testing/musterd.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::FreePort;
using ::muster::testing::HttpGet;
using ::muster::testing::MusterdProcess;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// GET http://127.0.0.1:port/path; returns the whole response (status line,
// headers, body), or
// "" when nothing answers within a few seconds.
std::vector<std::string> Agent(const std::string& endpoint,
                               const std::string& job,
                               std::vector<std::string> program) {
  std::vector<std::string> argv = {
      BinPath("muster"), "--nnodes=2", "--nproc-per-node=2",
      "--rdzv-endpoint=" + endpoint, "--rdzv-id=" + job};
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

TEST(DiagnosticsE2eTest, StatusShowsTheMembersOfARunningJob) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  const std::string endpoint = server.endpoint();
  std::vector<std::string> sleeper = {"--no-python", BinPath("test_worker"),
                                      "--sleep=30"};
  Subprocess a(Agent(endpoint, "status-job", sleeper));
  Subprocess b(Agent(endpoint, "status-job", sleeper));
  ASSERT_TRUE(a.WaitForOutput("round 1: node", absl::Seconds(30)))
      << a.Output();
  ASSERT_TRUE(b.WaitForOutput("round 1: node", absl::Seconds(30)))
      << b.Output();

  Subprocess status(
      {BinPath("muster"), "status", "--rdzv-endpoint=" + endpoint});
  ASSERT_EQ(status.WaitOrKill(absl::Seconds(20)), 0) << status.Output();
  const std::string out = status.Output();
  EXPECT_THAT(out, HasSubstr("job status-job: RUNNING, round 1, 2 nodes"));
  EXPECT_THAT(out, HasSubstr("0-1"));  // group rank 0's global ranks
  EXPECT_THAT(out, HasSubstr("2-3"));

  Subprocess json({BinPath("muster"), "status", "--rdzv-endpoint=" + endpoint,
                   "--json", "status-job"});
  ASSERT_EQ(json.WaitOrKill(absl::Seconds(20)), 0) << json.Output();
  EXPECT_THAT(json.Output(), HasSubstr("\"job_id\": \"status-job\""));
  EXPECT_THAT(json.Output(), HasSubstr("\"state\": \"RUNNING\""));

  Subprocess unknown(
      {BinPath("muster"), "status", "--rdzv-endpoint=" + endpoint, "nojob"});
  EXPECT_EQ(unknown.WaitOrKill(absl::Seconds(20)), 1) << unknown.Output();
  EXPECT_THAT(unknown.Output(), HasSubstr("no job 'nojob'"));

  // Nothing listens: a one-shot query says so at once instead of waiting
  // out its 60 s timeout (WaitOrKill kills it, and returns -1, long before
  // that).
  const std::string nobody = absl::StrCat("127.0.0.1:", FreePort());
  Subprocess unreachable({BinPath("muster"), "status",
                          "--rdzv-endpoint=" + nobody, "--timeout=60"});
  EXPECT_EQ(unreachable.WaitOrKill(absl::Seconds(15)), 3)
      << unreachable.Output();
  EXPECT_THAT(unreachable.Output(), HasSubstr(nobody));
  EXPECT_THAT(unreachable.Output(), HasSubstr("nothing is listening there"));
}

TEST(DiagnosticsE2eTest, HealthAndMetricsEndpointsAnswerARealHttpClient) {
  const std::string endpoint = absl::StrCat("127.0.0.1:", FreePort());
  const int http_port = FreePort();
  Subprocess server({BinPath("musterd"), "--listen=" + endpoint,
                     absl::StrCat("--http-listen=127.0.0.1:", http_port)});
  ASSERT_TRUE(server.WaitForOutput("/metrics", absl::Seconds(20)))
      << server.Output();

  EXPECT_THAT(HttpGet(http_port, "/healthz"), HasSubstr("200 OK"));
  std::string ready = HttpGet(http_port, "/readyz");
  EXPECT_THAT(ready, HasSubstr("200 OK"));
  EXPECT_THAT(ready, HasSubstr("ready"));
  EXPECT_THAT(HttpGet(http_port, "/nope"), HasSubstr("404"));

  // A job whose workers bootstrap Gloo through the Store, so store operations
  // are counted.
  Subprocess a(
      Agent(endpoint, "metrics-job", {BinPath("train"), "--epochs=5"}));
  Subprocess b(
      Agent(endpoint, "metrics-job", {BinPath("train"), "--epochs=5"}));
  ASSERT_EQ(a.WaitOrKill(absl::Seconds(90)), 0) << a.Output();
  ASSERT_EQ(b.WaitOrKill(absl::Seconds(90)), 0) << b.Output();

  // The workers' Store streams end on the server a moment after they exited
  // (a stream is observed at its end): wait for that, not for a fixed time.
  std::string metrics;
  WaitUntil(
      [&] {
        metrics = HttpGet(http_port, "/metrics");
        return absl::StrContains(
            metrics,
            "muster_rpc_duration_seconds_bucket{method=\"/muster.v1.Store/");
      },
      absl::Seconds(10), absl::Milliseconds(100));
  EXPECT_THAT(metrics,
              AllOf(HasSubstr("text/plain; version=0.0.4"),
                    HasSubstr("muster_jobs{state=\"SUCCEEDED\"} 1"),
                    HasSubstr("muster_job_round{job=\"metrics-job\"} 1"),
                    HasSubstr("muster_store_ops_total{op=\"Set\"}"),
                    HasSubstr("muster_store_ops_total{op=\"Get\"}"),
                    HasSubstr("muster_rpc_total{method=\"/muster.v1.Rendezvous/"
                              "Session\",code=\"OK\"}"),
                    HasSubstr("muster_rpc_duration_seconds_bucket{method=\"/"
                              "muster.v1.Store/"),
                    HasSubstr("muster_build_info{version=")));
}

TEST(DiagnosticsE2eTest, AgentServesItsNodesProbes) {
  const int port = FreePort();
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=2",
                absl::StrCat("--health-port=", port), "--rdzv-id=probed",
                "--no-python", BinPath("test_worker"), "--sleep=30"});
  ASSERT_TRUE(p.WaitForOutput("round 1: node", absl::Seconds(30)))
      << p.Output();
  std::string ready;
  WaitUntil(
      [&] {
        ready = HttpGet(port, "/readyz");
        return absl::StrContains(ready, "200 OK");
      },
      absl::Seconds(10));
  EXPECT_THAT(ready, HasSubstr("RUNNING round 1"));
  EXPECT_THAT(HttpGet(port, "/healthz"), HasSubstr("200 OK"));
  const std::string metrics = HttpGet(port, "/metrics");
  EXPECT_THAT(metrics,
              HasSubstr("muster_agent_workers_running{job=\"probed\"} 2"));
  EXPECT_THAT(
      metrics,
      HasSubstr("muster_agent_state{job=\"probed\",state=\"RUNNING\"} 1"));
}

TEST(DiagnosticsE2eTest, WatchdogKillsAWorkerThatStopsMakingProgress) {
  // Rank 1 stops itself (SIGSTOP); rank 0 keeps touching its progress file.
  const std::string script =
      "if [ \"$RANK\" = 1 ]; then kill -STOP $$; fi; "
      "i=0; while [ $i -lt 40 ]; do touch \"$MUSTER_PROGRESS_FILE\"; sleep "
      "0.25; "
      "i=$((i+1)); done";
  absl::Time start = absl::Now();
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=2",
                "--worker-timeout=2", "--no-python", "/bin/sh", "-c", script});
  EXPECT_EQ(p.WaitOrKill(absl::Seconds(60)), 1) << p.Output();
  EXPECT_LT(absl::Now() - start, absl::Seconds(9))
      << "the hung worker was not caught in time";
  const std::string out = p.Output();
  auto cause = testing::LinesWith(out, "root cause:");
  ASSERT_EQ(cause.size(), 1u) << out;
  EXPECT_THAT(cause[0], HasSubstr("worker rank 1"));
  EXPECT_THAT(cause[0], HasSubstr("hung: no progress for 2s"));
  EXPECT_THAT(out, Not(HasSubstr("local rank 0 (rank 0) hung")));
}

}  // namespace
}  // namespace muster
