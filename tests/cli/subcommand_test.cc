// The one-shot subcommands' command lines: ParseSubcommandArgs, the
// `muster status --timeout` value going through the common duration parser,
// and the status output's header.
#include "cli/subcommand.h"

#include <string>
#include <vector>

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

}  // namespace
}  // namespace muster::cli
