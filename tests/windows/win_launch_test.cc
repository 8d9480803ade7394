// The launcher's Windows answers (platform/windows/launch_os_windows.cc) and
// the launch command line's Windows cases (paths with '\' and drives, .exe
// found without its extension, .py through python, the signals Windows has),
// under wine.
#include <windows.h>

#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/launch_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/launch_os.h"
#include "platform/windows/win_util.h"
#include "tests/windows/win_test_util.h"

namespace muster::cli {

namespace os = platform::os;
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using wintest::HelperPath;
using wintest::TempDir;

void Touch(const std::string& path) {
  HANDLE h =
      CreateFileW(platform::windows::Widen(path).c_str(), GENERIC_WRITE, 0,
                  nullptr, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr);
  ASSERT_NE(h, INVALID_HANDLE_VALUE) << path;
  CloseHandle(h);
}

std::map<std::string, std::string> Env() {
  return {{"PATH", "C:\\windows\\system32"}};
}

TEST(LaunchOs, PathKindsByExtension) {
  TempDir dir;
  Touch(dir / "train.py");
  Touch(dir / "tool.EXE");
  EXPECT_EQ(os::StatPath(HelperPath()), os::PathKind::kExecutableFile);
  EXPECT_EQ(os::StatPath(dir / "tool.EXE"), os::PathKind::kExecutableFile);
  EXPECT_EQ(os::StatPath(dir / "train.py"), os::PathKind::kPlainFile);
  EXPECT_EQ(os::StatPath(dir.path()), os::PathKind::kOther);
  EXPECT_EQ(os::StatPath(dir / "missing.exe"), os::PathKind::kMissing);
  // UTF-8 names.
  Touch(dir / "tr\xc3\xa4in.exe");
  EXPECT_EQ(os::StatPath(dir / "tr\xc3\xa4in.exe"),
            os::PathKind::kExecutableFile);
}

TEST(LaunchOs, PathsAndNames) {
  EXPECT_TRUE(os::HasDirectory("C:\\jobs\\train.exe"));
  EXPECT_TRUE(os::HasDirectory("jobs/train.exe"));
  EXPECT_TRUE(os::HasDirectory("C:train.exe"));
  EXPECT_FALSE(os::HasDirectory("train.exe"));
  EXPECT_STREQ(os::kDefaultPython, "python");
}

TEST(LaunchOs, CpusAndSignals) {
  EXPECT_GE(os::UsableCpuCount(), 1);
  EXPECT_EQ(os::SignalNumber("TERM"), 15);
  EXPECT_EQ(os::SignalNumber("INT"), 2);
  EXPECT_EQ(os::SignalNumber("HUP"), 1);
  EXPECT_EQ(os::SignalNumber("USR1"), std::nullopt);  // no such event
  EXPECT_TRUE(os::IsSignalNumber(15));
  EXPECT_FALSE(os::IsSignalNumber(10));
  EXPECT_TRUE(os::IsUncatchableSignal(9));
  EXPECT_FALSE(os::IsUncatchableSignal(15));
}

TEST(LaunchCommand, SignalsToHandleOnWindows) {
  auto ok = ParseLaunchCommand(
      {"--signals-to-handle=SIGTERM,SIGINT", "--no-python", "train.exe"},
      Env());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ok->config.signals_to_handle, ElementsAre(15, 2));
  auto bad = ParseLaunchCommand(
      {"--signals-to-handle=SIGUSR1", "--no-python", "train.exe"}, Env());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown signal 'SIGUSR1'"));
}

TEST(LaunchCommand, ProgramByWindowsPath) {
  TempDir dir;
  ASSERT_TRUE(CopyFileW(platform::windows::Widen(HelperPath()).c_str(),
                        platform::windows::Widen(dir / "train.exe").c_str(),
                        FALSE));
  // With a backslash path: run directly, also without its .exe.
  for (const std::string& prog : {dir / "train.exe", dir / "train"}) {
    auto cmd = ParseLaunchCommand({"--nproc-per-node=2", prog}, Env());
    ASSERT_TRUE(cmd.ok()) << cmd.status();
    EXPECT_EQ(cmd->config.program.front(), prog);
    EXPECT_TRUE(CheckProgram(cmd->config, Env()).ok())
        << CheckProgram(cmd->config, Env());
  }
  auto missing = ParseLaunchCommand({dir / "nothing.exe"}, Env());
  ASSERT_TRUE(missing.ok());
  EXPECT_THAT(CheckProgram(missing->config, Env()).message(),
              HasSubstr("no such file"));
}

TEST(LaunchCommand, PythonScriptRunsThroughPython) {
  TempDir dir;
  Touch(dir / "train.py");
  auto cmd = ParseLaunchCommand({dir / "train.py", "--lr=1"}, Env());
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_THAT(cmd->config.program,
              ElementsAre("python", "-u", dir / "train.py", "--lr=1"));
  EXPECT_EQ(cmd->config.python_source, "python from PATH");
  // Without python.exe in PATH the check names the fix.
  EXPECT_THAT(CheckProgram(cmd->config, Env()).message(),
              HasSubstr("--python=PATH"));
}

}  // namespace
}  // namespace muster::cli
