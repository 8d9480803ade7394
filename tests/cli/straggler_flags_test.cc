// The straggler policy's flags (--straggler-action, --straggler-threshold,
// --straggler-window, --exclude-cooldown): their defaults, their values, and
// the refusals that name the flag and the fix. The table's own checks (help,
// PET_ spellings, bounds) are in launch_flag_table_test.cc.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/launch_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::cli {
namespace {

using agent::AgentConfig;
using agent::StragglerAction;
using ::testing::HasSubstr;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

HostResources Host() {
  HostResources h;
  h.cpus = 8;
  h.gpu_source = "test";
  return h;
}

AgentConfig ParseOk(const Args& args, const Env& env = {}) {
  absl::StatusOr<LaunchCommand> cmd = ParseLaunchCommand(args, env, Host());
  EXPECT_TRUE(cmd.ok()) << absl::StrJoin(args, " ") << " -> " << cmd.status();
  return cmd.ok() ? cmd->config : AgentConfig{};
}

std::string ParseError(const Args& args, const Env& env = {}) {
  absl::StatusOr<LaunchCommand> cmd = ParseLaunchCommand(args, env, Host());
  EXPECT_FALSE(cmd.ok()) << absl::StrJoin(args, " ") << " parsed";
  if (cmd.ok()) return "";
  EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(cmd.status().message());
}

TEST(StragglerFlagsTest, Defaults) {
  const AgentConfig c = ParseOk({"x"});
  EXPECT_EQ(c.straggler_action, StragglerAction::kReport);
  EXPECT_DOUBLE_EQ(c.straggler_threshold, 0.7);
  EXPECT_EQ(c.straggler_window, absl::Seconds(20));
  EXPECT_EQ(c.exclude_cooldown, absl::Minutes(10));
  EXPECT_EQ(c.exclude_after_failures, 0);
}

TEST(StragglerFlagsTest, Values) {
  const AgentConfig c =
      ParseOk({"--straggler-action=exclude", "--straggler_threshold=0.5",
               "--straggler-window=1m", "--exclude-cooldown=90", "x"});
  EXPECT_EQ(c.straggler_action, StragglerAction::kExclude);
  EXPECT_DOUBLE_EQ(c.straggler_threshold, 0.5);
  EXPECT_EQ(c.straggler_window, absl::Minutes(1));
  EXPECT_EQ(c.exclude_cooldown, absl::Seconds(90));
  EXPECT_EQ(ParseOk({"--exclude-after-failures=3", "x"}).exclude_after_failures,
            3);
  EXPECT_EQ(ParseOk({"--recovery=in-place", "--straggler-action=Replace", "x"})
                .straggler_action,
            StragglerAction::kReplace);
  EXPECT_EQ(ParseOk({"x"}, {{"PET_STRAGGLER_ACTION", "exclude"},
                            {"PET_EXCLUDE_COOLDOWN", "1h"}})
                .exclude_cooldown,
            absl::Hours(1));
}

TEST(StragglerFlagsTest, BadValuesNameTheFlagAndTheFix) {
  EXPECT_THAT(ParseError({"--straggler-action=kill", "x"}),
              HasSubstr("--straggler-action=kill"));
  EXPECT_THAT(ParseError({"--straggler-action=kill", "x"}),
              HasSubstr("expected report, replace or exclude"));
  for (const char* bad : {"0", "1", "1.5", "-0.2", "nan", "fast"}) {
    SCOPED_TRACE(bad);
    const std::string error =
        ParseError({std::string("--straggler-threshold=") + bad, "x"});
    EXPECT_THAT(error, HasSubstr(std::string("--straggler-threshold=") + bad));
    EXPECT_THAT(error, HasSubstr("between 0 and 1"));
  }
  for (const char* bad : {"0", "0.5", "-1", "2h", "soon"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseError({std::string("--straggler-window=") + bad, "x"}),
                HasSubstr("from 1s to 1h"));
  }
  EXPECT_THAT(ParseError({"--exclude-cooldown=0", "x"}),
              HasSubstr("--exclude-cooldown=0"));
  for (const char* bad : {"-1", "1001", "two"}) {
    SCOPED_TRACE(bad);
    const std::string error =
        ParseError({std::string("--exclude-after-failures=") + bad, "x"});
    EXPECT_THAT(error,
                HasSubstr(std::string("--exclude-after-failures=") + bad));
    EXPECT_THAT(error, HasSubstr("from 0 (never) to 1000"));
  }
  EXPECT_THAT(ParseError({"x"}, {{"PET_STRAGGLER_THRESHOLD", "2"}}),
              HasSubstr("PET_STRAGGLER_THRESHOLD"));
}

// Replacing a node under --recovery=restart would stop every other node's
// workers too: refused, with the fix.
TEST(StragglerFlagsTest, ReplaceNeedsInPlaceRecovery) {
  const std::string error = ParseError({"--straggler-action=replace", "x"});
  EXPECT_THAT(error, HasSubstr("--straggler-action=replace needs "
                               "--recovery=in-place"));
  EXPECT_THAT(error, HasSubstr("other nodes keep their processes"));
  EXPECT_THAT(
      ParseError({"--recovery=restart", "--straggler-action=replace", "x"}),
      HasSubstr("add --recovery=in-place"));
  ParseOk({"--straggler-action=replace", "x"}, {{"PET_RECOVERY", "in-place"}});
  ParseOk({"--straggler-action=exclude", "x"});
}

}  // namespace
}  // namespace muster::cli
