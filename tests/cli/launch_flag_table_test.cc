// The launcher's flag table (cli/launch_flag_table.h): every row is complete
// and consistent with what the parser does with it. The behaviour of each
// flag is tested in launch_flags_test.cc.
#include "cli/launch_flag_table.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

HostResources Host() {
  HostResources h;
  h.cpus = 8;
  h.gpus = 2;
  h.gpu_source = "test";
  return h;
}

// Every field of the config that a flag can change, as text, so that two
// configs compare in one EXPECT_EQ that shows the difference.
std::string Dump(const LaunchCommand& cmd) {
  const agent::AgentConfig& c = cmd.config;
  auto map = [](const std::map<int, int>& m) {
    return absl::StrJoin(m, ",", absl::PairFormatter(":"));
  };
  return absl::StrCat(
      "mode=", static_cast<int>(c.mode), " run_id=", c.run_id,
      " nodes=", c.min_nodes, ":", c.max_nodes, " nproc=", c.nproc_per_node,
      " role=", c.role, " restarts=", c.max_restarts,
      " monitor=", absl::FormatDuration(c.monitor_interval),
      " endpoint=", c.rdzv_endpoint, " embed=", c.embed_server,
      c.embed_if_local, c.embed_listen, " node_rank=", c.node_rank,
      " master=", c.master_addr, ":", c.master_port, " local=", c.local_addr,
      " join=", absl::FormatDuration(c.join_timeout),
      " last_call=", absl::FormatDuration(c.last_call_timeout),
      " close=", absl::FormatDuration(c.close_timeout),
      " read=", absl::FormatDuration(c.read_timeout),
      " connect=", absl::FormatDuration(c.connect_timeout),
      " reconnect=", absl::FormatDuration(c.reconnect_timeout),
      " heartbeat=", absl::FormatDuration(c.heartbeat_interval), "x",
      c.heartbeat_max_missed, " tls=", c.security.tls_ca, c.security.tls_cert,
      c.security.tls_key, " program=", absl::StrJoin(c.program, " "),
      " preflight=", c.preflight, absl::FormatDuration(c.preflight_timeout),
      " health=", c.health_port,
      " watchdog=", absl::FormatDuration(c.worker_timeout),
      " stragglers=", static_cast<int>(c.straggler_action), ",",
      c.straggler_threshold, ",", absl::FormatDuration(c.straggler_window), ",",
      absl::FormatDuration(c.exclude_cooldown),
      " grace=", absl::FormatDuration(c.stop_grace),
      " signals=", absl::StrJoin(c.signals_to_handle, ","),
      " numa=", c.numa_binding, " vlr=", c.virtual_local_rank,
      " events=", c.event_log_handler, " python=", c.python_interpreter, "/",
      c.python_source, " log_dir=", c.log_dir, " redirects=", map(c.redirects),
      " tees=", map(c.tees),
      " filter=", absl::StrJoin(c.local_ranks_filter, ","),
      " dup=", absl::StrJoin(c.duplicate_stdout_filters, "|"), "/",
      absl::StrJoin(c.duplicate_stderr_filters, "|"),
      " warnings=", absl::StrJoin(cmd.warnings, "|"));
}

TEST(LaunchFlagTableTest, EveryRowIsComplete) {
  std::set<std::string> spellings;
  for (const LaunchFlag& f : LaunchFlagTable()) {
    SCOPED_TRACE(f.name);
    const std::string name = f.name;
    EXPECT_FALSE(name.empty());
    EXPECT_EQ(name, absl::AsciiStrToLower(name));
    EXPECT_FALSE(absl::StrContains(name, "_")) << "the dash spelling is kept";
    EXPECT_EQ(f.UnderscoreName(), absl::StrReplaceAll(name, {{"-", "_"}}));
    EXPECT_EQ(f.EnvName(), "PET_" + absl::AsciiStrToUpper(f.UnderscoreName()));
    EXPECT_TRUE(spellings.insert(name).second) << "spelled twice";
    if (f.UnderscoreName() != name) {
      EXPECT_TRUE(spellings.insert(f.UnderscoreName()).second);
    }
    if (*f.short_name != '\0') {
      EXPECT_EQ(std::string(f.short_name).size(), 1u);
      EXPECT_TRUE(spellings.insert(f.short_name).second);
    }
    ASSERT_NE(f.group, nullptr);
    ASSERT_NE(f.help, nullptr);
    ASSERT_NE(f.fills, nullptr);
    ASSERT_NE(f.apply, nullptr);
    EXPECT_GT(std::string(f.help).size(), 20u);
    EXPECT_TRUE(absl::EndsWith(f.help, ".") || absl::EndsWith(f.help, "..."))
        << f.help;
    if (f.takes_value()) {
      EXPECT_FALSE(std::string(f.value_name).empty());
    }
    if (f.fallback_env != nullptr) {
      EXPECT_THAT(f.help, HasSubstr(f.fallback_env)) << "documented";
    }
  }
  EXPECT_GE(LaunchFlagTable().size(), 34u);
}

TEST(LaunchFlagTableTest, FindsEverySpelling) {
  for (const LaunchFlag& f : LaunchFlagTable()) {
    EXPECT_EQ(FindLaunchFlag(f.name, false), &f);
    EXPECT_EQ(FindLaunchFlag(f.UnderscoreName(), false), &f);
    if (*f.short_name != '\0') {
      EXPECT_EQ(FindLaunchFlag(f.short_name, true), &f);
    }
  }
  EXPECT_EQ(FindLaunchFlag("nproc", false), nullptr);
  EXPECT_EQ(FindLaunchFlag("x", true), nullptr);
}

TEST(LaunchFlagTableTest, HelpNamesEveryFlagItsSpellingsAndItsVariable) {
  absl::StatusOr<LaunchCommand> help =
      ParseLaunchCommand({"--help"}, {}, Host());
  ASSERT_TRUE(help.ok());
  for (const LaunchFlag& f : LaunchFlagTable()) {
    SCOPED_TRACE(f.name);
    EXPECT_THAT(help->help_text, HasSubstr(absl::StrCat("--", f.name)));
    EXPECT_THAT(help->help_text,
                HasSubstr(absl::StrCat("--", f.UnderscoreName())));
    EXPECT_THAT(help->help_text,
                HasSubstr(absl::StrCat("[env ", f.EnvName(), "]")));
    EXPECT_THAT(help->help_text, HasSubstr(f.group));
    if (f.takes_value()) {
      EXPECT_THAT(help->help_text, HasSubstr(f.value_name));
    }
  }
}

// Applies `value` to a fresh LaunchSettings through the row's own function.
absl::Status Apply(const LaunchFlag& f, const std::string& value) {
  const Env env;
  const std::function<HostResources()> host = Host;
  LaunchSettings s;
  return f.apply(f, Given{value, absl::StrCat("--", f.name)},
                 FlagContext{env, host}, &s);
}

std::string Seconds(absl::Duration d) {
  return absl::StrCat(absl::ToDoubleSeconds(d));
}

TEST(LaunchFlagTableTest, BoundsAreWhatTheFlagAccepts) {
  int bounded = 0;
  for (const LaunchFlag& f : LaunchFlagTable()) {
    SCOPED_TRACE(f.name);
    if (const IntRange* r = std::get_if<IntRange>(&f.bounds)) {
      ++bounded;
      EXPECT_LE(r->lo, r->hi);
      EXPECT_TRUE(Apply(f, absl::StrCat(r->lo)).ok());
      EXPECT_TRUE(Apply(f, absl::StrCat(r->hi)).ok());
      EXPECT_FALSE(Apply(f, absl::StrCat(int64_t{r->lo} - 1)).ok());
      EXPECT_FALSE(Apply(f, absl::StrCat(int64_t{r->hi} + 1)).ok());
    } else if (const DurationRange* d = std::get_if<DurationRange>(&f.bounds)) {
      ++bounded;
      EXPECT_LE(d->min, d->max);
      EXPECT_TRUE(Apply(f, Seconds(d->min)).ok());
      EXPECT_FALSE(Apply(f, "-1").ok());
      if (d->min > absl::ZeroDuration()) {
        EXPECT_FALSE(Apply(f, Seconds(d->min / 2)).ok());
      }
      if (d->max != absl::InfiniteDuration()) {
        EXPECT_TRUE(Apply(f, Seconds(d->max)).ok());
        EXPECT_FALSE(Apply(f, Seconds(d->max * 2)).ok());
      }
    }
  }
  EXPECT_GE(bounded, 8);
}

TEST(LaunchFlagTableTest, DefaultsAreWithinBoundsAndChangeNothing) {
  const Env no_env;
  absl::StatusOr<LaunchCommand> plain =
      ParseLaunchCommand({"train.exe"}, no_env, Host());
  ASSERT_TRUE(plain.ok()) << plain.status();
  int with_default = 0;
  for (const LaunchFlag& f : LaunchFlagTable()) {
    if (f.default_value == nullptr) continue;
    SCOPED_TRACE(absl::StrCat(f.name, "=", f.default_value));
    ++with_default;
    EXPECT_TRUE(Apply(f, f.default_value).ok());
    if (const IntRange* r = std::get_if<IntRange>(&f.bounds)) {
      const int v = std::stoi(f.default_value);
      EXPECT_TRUE(v >= r->lo && v <= r->hi);
    } else if (const DurationRange* d = std::get_if<DurationRange>(&f.bounds)) {
      EXPECT_TRUE(ParseDurationInRange(f.default_value, *d).ok());
    }
    // Given through PET_ and on the command line, the default is what the
    // launcher does without it.
    absl::StatusOr<LaunchCommand> env = ParseLaunchCommand(
        {"train.exe"}, {{f.EnvName(), f.default_value}}, Host());
    ASSERT_TRUE(env.ok()) << env.status();
    EXPECT_EQ(Dump(*env), Dump(*plain));
    if (f.takes_value()) {
      absl::StatusOr<LaunchCommand> flag = ParseLaunchCommand(
          {absl::StrCat("--", f.name, "=", f.default_value), "train.exe"},
          no_env, Host());
      ASSERT_TRUE(flag.ok()) << flag.status();
      EXPECT_EQ(Dump(*flag), Dump(*plain));
    }
  }
  EXPECT_GE(with_default, 15);
}

TEST(LaunchFlagTableTest, AValueErrorNamesWhereTheValueCameFrom) {
  for (const LaunchFlag& f : LaunchFlagTable()) {
    if (!f.takes_value()) continue;
    SCOPED_TRACE(f.name);
    absl::StatusOr<LaunchCommand> cmd = ParseLaunchCommand(
        {"train.exe"}, {{f.EnvName(), "\x01?bad value"}}, Host());
    // Free text (a role, a directory) takes anything; all else is refused
    // naming the variable, never silently dropped.
    if (!cmd.ok()) {
      EXPECT_THAT(std::string(cmd.status().message()), StartsWith(f.EnvName()));
    }
  }
}

}  // namespace
}  // namespace muster::cli
