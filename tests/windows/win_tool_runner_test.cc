// The Windows ToolRunner (platform/windows/tool_runner_windows.cc) under
// wine: real processes of win_test_helper.exe (both streams in the output,
// exit codes, a tool not found), a stuck tool and its child killed with its
// job at the deadline, and wine's own netsh.exe found and answering.
#include <windows.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/env.h"
#include "muster/platform/tool_runner.h"
#include "tests/windows/win_test_util.h"

namespace muster::platform {
namespace {

using ::testing::HasSubstr;
using wintest::HelperPath;
using wintest::TempDir;

// Wine starts a process in seconds on a loaded machine.
constexpr absl::Duration kGenerous = absl::Seconds(90);

TEST(WindowsToolRunner, BothStreamsAndTheExitCode) {
  ToolRunner& tools = SystemToolRunner();
  ToolResult r =
      tools.Run({HelperPath(), "print", "2"}, CurrentEnvironment(), kGenerous);
  EXPECT_TRUE(r.found);
  EXPECT_TRUE(absl::EndsWithIgnoreCase(r.path, "win_test_helper.exe"))
      << r.path;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("out 1"));
  EXPECT_THAT(r.output, HasSubstr("err 1"));  // stderr too
  EXPECT_THAT(r.output, HasSubstr("partial"));

  r = tools.Run({HelperPath(), "exit", "3"}, CurrentEnvironment(), kGenerous);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.exit_code, 3);
}

TEST(WindowsToolRunner, AMissingToolIsNotFound) {
  ToolResult r = SystemToolRunner().Run({"muster-no-such-tool-7f3a"},
                                        CurrentEnvironment(), kGenerous);
  EXPECT_FALSE(r.found);
  EXPECT_THAT(r.output, HasSubstr("muster-no-such-tool-7f3a"));
  EXPECT_FALSE(SystemToolRunner().Run({}, {}, kGenerous).found);
}

TEST(WindowsToolRunner, AStuckToolAndItsChildAreKilledAtTheDeadline) {
  TempDir dir;
  const std::string pid_file = dir / "grandchild.pid";
  const absl::Time start = absl::Now();
  // "tree": starts a grandchild that sleeps, writes its pid, sleeps. The
  // deadline leaves wine room to start both.
  ToolResult r =
      SystemToolRunner().Run({HelperPath(), "tree", pid_file},
                             CurrentEnvironment(), absl::Seconds(20));
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(r.found);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 137);  // 128 + SIGKILL, as on Linux
  EXPECT_THAT(r.output, HasSubstr("ready"));
  EXPECT_GE(took, absl::Seconds(19));
  EXPECT_LT(took, absl::Seconds(60));
  const std::string pid_text = wintest::ReadText(pid_file);
  ASSERT_FALSE(pid_text.empty()) << "the helper did not start its child";
  const DWORD pid = std::stoul(pid_text);
  HANDLE h = OpenProcess(SYNCHRONIZE, FALSE, pid);
  if (h != nullptr) {  // else already gone and reaped
    EXPECT_EQ(WaitForSingleObject(h, 10000), WAIT_OBJECT_0)
        << "the grandchild outlived the tool's job";
    CloseHandle(h);
  }
}

TEST(WindowsToolRunner, NetshIsFoundAndAnswers) {
  ToolResult r =
      SystemToolRunner().Run({"netsh", "advfirewall", "show", "currentprofile"},
                             CurrentEnvironment(), kGenerous);
  EXPECT_TRUE(r.found) << r.output;
  EXPECT_TRUE(absl::EndsWithIgnoreCase(r.path, "netsh.exe")) << r.path;
  EXPECT_FALSE(r.timed_out);
  // Windows prints the profile; wine's stub prints nothing and exits 0.
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace muster::platform
