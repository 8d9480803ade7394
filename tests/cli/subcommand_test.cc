// The one-shot subcommands' command lines: ParseSubcommandArgs, and the
// `muster status --timeout` value going through the common duration parser.
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

}  // namespace
}  // namespace muster::cli
