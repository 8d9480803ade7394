// The one-shot subcommands' command lines: ParseSubcommandArgs, the
// `muster status --timeout` value going through the common duration parser,
// and the status output's header.
#include "cli/subcommand.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/status.h"
#include "gtest/gtest.h"
#include "muster/agent/exit_codes.h"

namespace muster::cli {
namespace {

std::optional<int> Parse(const std::vector<std::string>& args, int* value) {
  CLI::App app("test", "test");
  app.add_option("--value", *value, "a number");
  return ParseSubcommandArgs(app, args, "muster test", 7);
}

TEST(SubcommandTest, GoesOnHelpsOrRefuses) {
  int value = 0;
  EXPECT_EQ(Parse({"--value=3"}, &value), std::nullopt);
  EXPECT_EQ(value, 3);
  EXPECT_EQ(Parse({"--help"}, &value), 0);
  EXPECT_EQ(Parse({"--bogus"}, &value), 7);
  EXPECT_EQ(Parse({"--value=x"}, &value), 7);
}

TEST(SubcommandTest, StatusRefusesABadTimeoutBeforeConnecting) {
  // Port 1 on loopback: were the timeout accepted, the query would fail with
  // UNAVAILABLE (exit 3), not as a usage error.
  for (const char* bad : {"--timeout=soon", "--timeout=0", "--timeout=-1"}) {
    EXPECT_EQ(RunStatus({"--rdzv-endpoint=127.0.0.1:1", bad}, {}),
              agent::kExitConfigError)
        << bad;
  }
}

// Issue 11: the header line carries the server's total; a listing shorter
// than the total (jobs came or went while paging) says so.
TEST(SubcommandTest, StatusPrintsTheTotalAndSaysWhenJobsAreMissing) {
  v1::GetStatusResponse status;
  status.set_server_version("1.2.3");
  status.add_jobs()->set_job_id("a");
  status.add_jobs()->set_job_id("b");
  status.set_total_jobs(2);
  std::string out = FormatStatus(status, "h:1");
  EXPECT_EQ(out.substr(0, out.find('\n')),
            "musterd at h:1 (version 1.2.3): 2 jobs");
  status.set_total_jobs(5);
  out = FormatStatus(status, "h:1");
  EXPECT_NE(out.find(": 5 jobs (2 listed; 3 more:"), std::string::npos) << out;
  // A musterd without paging sends no total: the jobs are counted.
  status.set_total_jobs(0);
  out = FormatStatus(status, "h:1");
  EXPECT_NE(out.find(": 2 jobs\n"), std::string::npos) << out;
  // A job too large for one response says what it left out.
  status.mutable_jobs(0)->set_members_omitted(7);
  out = FormatStatus(status, "h:1");
  EXPECT_NE(out.find("7 more members"), std::string::npos) << out;
}

// One job's answer shows its round's Store use against the limits.
TEST(SubcommandTest, StatusShowsTheStoreUseOfOneJob) {
  v1::GetStatusResponse status;
  v1::JobStatus* job = status.add_jobs();
  job->set_job_id("j");
  std::string out = FormatStatus(status, "h:1");
  EXPECT_EQ(out.find("store ("), std::string::npos) << out;
  v1::StoreUsage* store = job->mutable_store();
  store->set_prefix("j/3");
  store->set_keys(900);
  store->set_max_keys(1000);
  store->set_bytes(3 << 20);
  store->set_max_bytes(int64_t{256} << 20);
  out = FormatStatus(status, "h:1");
  EXPECT_NE(out.find("  store (j/3): 900 keys of 1000, 3.0 MiB of 256.0 MiB "
                     "(90% of the nearer limit)\n"),
            std::string::npos)
      << out;
}

// The straggler lines appear only when there is something to say: a
// straggler, an excluded node, or a policy other than the default.
TEST(SubcommandTest, StatusNamesStragglersAndExcludedNodes) {
  v1::GetStatusResponse status;
  v1::JobStatus* job = status.add_jobs();
  job->set_job_id("j");
  job->set_straggler_action("report");
  job->set_straggler_threshold(0.7);
  const absl::TimeZone utc = absl::UTCTimeZone();
  std::string out = FormatStatus(status, "h:1", utc);
  EXPECT_EQ(out.find("straggler"), std::string::npos) << out;
  EXPECT_EQ(out.find("excluded"), std::string::npos) << out;

  job->set_straggler_action("replace");
  out = FormatStatus(status, "h:1", utc);
  EXPECT_NE(out.find("  stragglers: none (action replace, threshold 0.7)\n"),
            std::string::npos)
      << out;

  // 2026-01-02 03:04:05 UTC.
  constexpr int64_t kSince = 1767323045000;
  v1::Straggler* st = job->add_stragglers();
  st->set_rank(3);
  st->set_node_id("n2");
  st->set_hostname("host-b");
  st->set_score(0.48);
  st->set_since(kSince);
  v1::ExcludedNode* x = job->add_excluded();
  x->set_node_id("n7");
  x->set_hostname("host-c");
  x->set_reason("straggler, score 0.41");
  x->set_since_unix_ms(kSince);
  x->set_until_unix_ms(kSince + 600000);
  out = FormatStatus(status, "h:1", utc);
  EXPECT_NE(out.find("  stragglers (action replace, threshold 0.7):\n"
                     "    rank 3 on host-b (node n2): speed 0.48 of the "
                     "median since 03:04:05\n"
                     "  excluded:\n"
                     "    node n7 (host-c) until 03:14:05: straggler, score "
                     "0.41\n"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace muster::cli
