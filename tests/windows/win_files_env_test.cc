// Files, environment, clock, signal names and stop requests on Windows
// (under wine).
#include <windows.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/platform/env.h"
#include "muster/platform/files.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "muster/platform/stop_requests.h"
#include "platform/windows/spawn_windows.h"
#include "platform/windows/stop_post.h"
#include "platform/windows/win_util.h"
#include "tests/windows/win_test_util.h"

namespace muster::platform {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using wintest::HelperPath;
using wintest::ReadText;
using wintest::TempDir;
using wintest::WaitUntil;

void WriteText(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, text).ok());
}

void CopyHelperTo(const std::string& path) {
  ASSERT_TRUE(CopyFileW(windows::Widen(HelperPath()).c_str(),
                        windows::Widen(path).c_str(), FALSE))
      << windows::LastErrorText();
}

TEST(Utf, RoundTrips) {
  const std::string s = "a \xc3\xbc \xe2\x82\xac \xf0\x9f\x98\x80";
  EXPECT_EQ(windows::Narrow(windows::Widen(s)), s);
  EXPECT_EQ(windows::Widen(s).size(), 8u);  // the emoji is a surrogate pair
}

TEST(Env, ReadsAndListsVariablesInUtf8) {
  const std::string value = "\xc3\xbc=\xe2\x82\xac";
  ASSERT_TRUE(SetEnvironmentVariableW(L"MUSTER_ENV_TEST",
                                      windows::Widen(value).c_str()));
  EXPECT_EQ(GetEnv("MUSTER_ENV_TEST"), value);
  // Names ignore case on Windows.
  EXPECT_EQ(GetEnv("muster_env_test"), value);
  EXPECT_EQ(CurrentEnvironment()["MUSTER_ENV_TEST"], value);
  SetEnvironmentVariableW(L"MUSTER_ENV_EMPTY", L"");
  EXPECT_EQ(GetEnv("MUSTER_ENV_EMPTY"), "");
  EXPECT_EQ(GetEnv("MUSTER_ENV_UNSET_XYZ"), std::nullopt);
  EXPECT_EQ(ProcessId(), static_cast<int>(GetCurrentProcessId()));
  EXPECT_FALSE(CurrentCpuAffinity().empty());
}

TEST(Env, EnvironmentBlockIsSortedIgnoringCase) {
  const std::wstring block = windows::EnvironmentBlock(
      {{"b", "2"}, {"A", "1"}, {"C", "3"}, {"bad=name", "x"}});
  EXPECT_EQ(block, std::wstring(L"A=1\0b=2\0C=3\0\0", 13));
}

TEST(FindExecutable, UsesPathExtAndResolvesPythonScripts) {
  TempDir dir;
  CopyHelperTo(dir / "tool.exe");
  CopyHelperTo(dir / "python.exe");
  WriteText(dir / "train.py", "print('hi')\n");
  WriteText(dir / "run.bat", "@echo off\n");
  WriteText(dir / "notes.txt", "hello\n");
  WriteText(dir / "script", "#!/usr/bin/env python\n");
  std::filesystem::create_directories(windows::Widen(dir / "adir"));
  const std::string path = dir.path();

  EXPECT_EQ(FindExecutable("tool", path).value_or(""), dir / "tool.exe");
  EXPECT_EQ(FindExecutable("tool.exe", path).value_or(""), dir / "tool.exe");
  EXPECT_EQ(FindExecutable(dir / "tool", "").value_or(""), dir / "tool.exe");
  EXPECT_EQ(FindExecutable("train", path).value_or(""), dir / "train.py");

  auto r = FindExecutable("run", path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("batch file"));
  r = FindExecutable(dir / "notes.txt", "");
  EXPECT_THAT(r.status().message(), HasSubstr("not a Windows program"));
  r = FindExecutable(dir / "script", "");
  EXPECT_THAT(r.status().message(), HasSubstr("#! line"));
  r = FindExecutable(dir / "adir", "");
  EXPECT_THAT(r.status().message(), HasSubstr("is a directory"));
  r = FindExecutable("no-such-tool", path);
  EXPECT_THAT(r.status().message(), HasSubstr("not found in PATH"));
  EXPECT_EQ(FindExecutable("", path).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A .py script runs through python.exe from the same PATH.
  auto resolved =
      windows::ResolveCommand({"train.py", "--lr", "0.1"}, {{"Path", path}});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->program, dir / "python.exe");
  EXPECT_EQ(resolved->argv,
            (std::vector<std::string>{dir / "python.exe", dir / "train.py",
                                      "--lr", "0.1"}));
  TempDir empty;
  WriteText(empty / "train.py", "\n");
  resolved = windows::ResolveCommand({"train.py"}, {{"PATH", empty.path()}});
  EXPECT_THAT(resolved.status().message(),
              HasSubstr("python.exe is not in PATH"));
}

TEST(Files, WriteFileAtomicallyReplacesRegularFilesOnly) {
  TempDir dir;
  const std::string f = dir / "state.json";
  ASSERT_TRUE(WriteFileAtomically(f, "one").ok());
  EXPECT_EQ(ReadText(f), "one");
  ASSERT_TRUE(WriteFileAtomically(f, std::string(100000, 'x')).ok());
  EXPECT_EQ(ReadText(f), std::string(100000, 'x'));
  // Nothing left beside it.
  int entries = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(windows::Widen(dir.path()))) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);

  auto s = WriteFileAtomically(dir.path(), "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("is a directory"));
  EXPECT_EQ(DescribeNonRegularFile("NUL"), "a character device");
  s = WriteFileAtomically("NUL", "x");
  EXPECT_THAT(s.message(), HasSubstr("is a character device"));
  EXPECT_EQ(DescribeNonRegularFile(f), "");
  EXPECT_EQ(DescribeNonRegularFile(dir / "absent"), "");
  s = WriteFileAtomically(dir / "no\\such\\dir\\f", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cannot create"));
}

TEST(Files, ModificationTimeAndTempDirectories) {
  TempDir dir;
  const std::string f = dir / "f";
  WriteText(f, "x");
  auto t = ModificationTime(f);
  ASSERT_TRUE(t.has_value());
  EXPECT_LT(absl::AbsDuration(*t - absl::Now()), absl::Minutes(5));
  EXPECT_EQ(ModificationTime(dir / "absent"), std::nullopt);

  auto a = MakeTempDirectory("muster-t-", dir.path());
  auto b = MakeTempDirectory("muster-t-", dir.path());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  EXPECT_THAT(*a, StartsWith(dir / "muster-t-"));
  EXPECT_EQ(DescribeNonRegularFile(*a), "a directory");
  auto bad = MakeTempDirectory("x", dir / "absent\\deeper");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
}

TEST(Files, LockConflictNamesTheHoldingProcess) {
  TempDir dir;
  const std::string f = dir / "store.lock";
  {
    auto held = FileLock::TryLock(f);
    ASSERT_TRUE(held.ok()) << held.status();
    auto again = FileLock::TryLock(f);
    EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(again.status().message(),
                HasSubstr(absl::StrCat("process ", GetCurrentProcessId())));
  }
  // Released with its FileLock.
  ASSERT_TRUE(FileLock::TryLock(f).ok());

  // Held by another process: the error names it; released when it ends.
  ProcessSpec spec;
  spec.argv = {HelperPath(), "lock", f};
  spec.env = CurrentEnvironment();
  spec.stdout_route.console = false;
  spec.stdout_route.file = dir / "out.txt";
  auto group = ProcessLauncher::Default()->Start({spec}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitUntil([&] { return ReadText(dir / "out.txt") == "locked\n"; },
                        absl::Seconds(60)));
  auto taken = FileLock::TryLock(f);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(taken.status().message(),
              HasSubstr(absl::StrCat("process ", (*group)->pids()[0],
                                     " (win_test_helper.exe)")));
  (*group)->Stop(kSignalKill, absl::ZeroDuration());
  EXPECT_TRUE(FileLock::TryLock(f).ok());
}

TEST(Clock, RealClockTracksSystemTime) {
  Clock* c = Clock::Real();
  EXPECT_LT(absl::AbsDuration(c->Now() - absl::Now()), absl::Seconds(1));
  const absl::Time start = c->Now();
  c->SleepFor(absl::Milliseconds(100));
  EXPECT_GE(c->Now() - start, absl::Milliseconds(95));
}

TEST(Signals, NamesAndExitCodes) {
  EXPECT_EQ(SignalName(kSignalTerminate), "SIGTERM");
  EXPECT_EQ(SignalNumber("int"), kSignalInterrupt);
  EXPECT_EQ(SignalNumber("SIGKILL"), kSignalKill);
  EXPECT_EQ(SignalNumber("bogus"), -1);
  EXPECT_EQ(DescribeExitCode(1), "exited with code 1");
  EXPECT_EQ(DescribeExitCode(static_cast<int>(0xC00000FD)),
            "exited with code 0xC00000FD (STATUS_STACK_OVERFLOW: a stack "
            "overflow)");
  EXPECT_THAT(DescribeExitCode(static_cast<int>(0xC0001234)),
              HasSubstr("0xC0001234 (an NTSTATUS"));
}

TEST(StopRequests, ConsoleEventsBecomeTheSignalsAskedFor) {
  // The console control handler is called directly: wine does not deliver
  // console events between processes, and this test must not depend on it.
  StopRequests stops({kSignalTerminate, kSignalHangup});
  EXPECT_EQ(windows::SignalOfCtrlEvent(CTRL_C_EVENT), kSignalInterrupt);
  EXPECT_EQ(windows::SignalOfCtrlEvent(CTRL_CLOSE_EVENT), kSignalHangup);
  EXPECT_TRUE(windows::ConsoleCtrlHandler(CTRL_BREAK_EVENT));
  // Not asked for: Windows' default handling (the process ends).
  EXPECT_FALSE(windows::ConsoleCtrlHandler(CTRL_C_EVENT));
  EXPECT_EQ(stops.Wait(), kSignalTerminate);

  std::atomic<int> seen{0};
  stops.StartWatcher([&seen](int sig) { seen = sig; });
  // The service manager's stop arrives even when not asked for.
  EXPECT_TRUE(windows::PostStopRequest(kSignalQuit, /*always=*/true));
  EXPECT_TRUE(
      WaitUntil([&] { return seen.load() == kSignalQuit; }, absl::Seconds(10)));
}

}  // namespace
}  // namespace muster::platform
