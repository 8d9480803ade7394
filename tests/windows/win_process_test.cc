// ProcessLauncher and RunCommand on Windows (under wine): real processes of
// win_test_helper.exe in job objects. Wine starts a process in about a
// second on an idle machine, several on a loaded one: each test starts few,
// and every wait has a generous deadline.
#include <windows.h>
// (after windows.h)
#include <fcntl.h>
#include <io.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "platform/windows/win_util.h"
#include "tests/windows/win_test_util.h"

namespace muster::platform {
namespace {

using ::testing::HasSubstr;
using wintest::HelperPath;
using wintest::ReadText;
using wintest::TempDir;
using wintest::WaitUntil;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

ProcessSpec Helper(std::vector<std::string> args, const std::string& out_file) {
  ProcessSpec spec;
  spec.argv = {HelperPath()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = CurrentEnvironment();
  spec.stdout_route.console = false;
  spec.stdout_route.file = out_file;
  spec.stderr_route.console = false;
  return spec;
}

// Waits until every process of `group` has ended (Wait returns at the first
// failure).
GroupStatus WaitAll(ProcessGroup& group, size_t n) {
  const absl::Time deadline = absl::Now() + kStartTimeout;
  GroupStatus st = group.Poll();
  while (st.exits.size() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    st = group.Poll();
  }
  return st;
}

const ProcessExit* ExitOf(const GroupStatus& st, size_t index) {
  for (const ProcessExit& e : st.exits) {
    if (e.index == index) return &e;
  }
  return nullptr;
}

std::string Hex(const std::string& s) {
  std::string out = "[";
  char b[3];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof(b), "%02x", c);
    out += b;
  }
  return out + "]";
}

TEST(QuoteArgument, FollowsTheMsvcrtRules) {
  using windows::QuoteArgument;
  EXPECT_EQ(QuoteArgument(L"plain"), L"plain");
  EXPECT_EQ(QuoteArgument(L""), L"\"\"");
  EXPECT_EQ(QuoteArgument(L"a b"), L"\"a b\"");
  EXPECT_EQ(QuoteArgument(L"a\"b"), L"\"a\\\"b\"");
  // Backslashes are literal unless they precede a quote.
  EXPECT_EQ(QuoteArgument(L"C:\\dir\\x"), L"C:\\dir\\x");
  EXPECT_EQ(QuoteArgument(L"C:\\my dir\\"), L"\"C:\\my dir\\\\\"");
  EXPECT_EQ(QuoteArgument(L"a\\\"b"), L"\"a\\\\\\\"b\"");
}

TEST(QuoteArgument, RoundTripsThroughAChildsArgv) {
  TempDir dir;
  const std::vector<std::string> args = {"",
                                         "a b",
                                         "a\"b",
                                         "C:\\my dir\\",
                                         "trail\\",
                                         "\\\"",
                                         "tab\there",
                                         "x\\\\\"y z",
                                         "new\nline",
                                         "\xc3\xbcnic\xc3\xb6"
                                         "de",
                                         "%PATH%",
                                         "semi;colon & | <>"};
  std::vector<std::string> helper_args = {"argv-hex"};
  helper_args.insert(helper_args.end(), args.begin(), args.end());
  auto group = ProcessLauncher::Default()->Start(
      {Helper(helper_args, dir / "out.txt")}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  GroupStatus st = (*group)->Wait(kStartTimeout);
  ASSERT_EQ(st.state, GroupState::kSucceeded);
  (*group)->Stop(kSignalTerminate, absl::Seconds(1));
  std::string expected;
  for (const std::string& a : args) expected += Hex(a) + "\n";
  EXPECT_EQ(ReadText(dir / "out.txt"), expected);
}

TEST(ProcessLauncher, ExitCodesAndNtStatusAreData) {
  TempDir dir;
  auto group = ProcessLauncher::Default()->Start(
      {Helper({"exit", "0"}, ""), Helper({"exit", "3"}, ""),
       Helper({"crash"}, "")},
      {});
  ASSERT_TRUE(group.ok()) << group.status();
  GroupStatus st = WaitAll(**group, 3);
  ASSERT_EQ(st.exits.size(), 3u);
  EXPECT_EQ(st.state, GroupState::kFailed);
  // Failures first.
  EXPECT_FALSE(st.exits[0].succeeded());
  EXPECT_EQ(ExitOf(st, 0)->exit_code, 0);
  EXPECT_EQ(ExitOf(st, 1)->exit_code, 3);
  EXPECT_EQ(ExitOf(st, 1)->signal, 0);
  const ProcessExit* crash = ExitOf(st, 2);
  EXPECT_EQ(static_cast<DWORD>(crash->exit_code), 0xC0000005u);
  EXPECT_THAT(DescribeExitCode(crash->exit_code),
              HasSubstr("0xC0000005 (STATUS_ACCESS_VIOLATION"));
  EXPECT_EQ(DescribeExitCode(3), "exited with code 3");
  const std::vector<int> pids = (*group)->pids();
  ASSERT_EQ(pids.size(), 3u);
  EXPECT_EQ(ExitOf(st, 1)->pid, pids[1]);
  (*group)->Stop(kSignalTerminate, absl::Seconds(1));
}

TEST(ProcessLauncher, PipesOutputAndPassesEnvAndCwd) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(_pipe(fds, 1 << 16, _O_BINARY), 0);
  ProcessSpec print = Helper({"print", "3"}, dir / "logs\\out.txt");
  print.stderr_route.console = true;
  print.line_prefix = "[r0]:";
  print.name = "printer";
  ProcessSpec env = Helper({"env", "MUSTER_T"}, dir / "env.txt");
  env.env["MUSTER_T"] = "\xc3\xbcn\xc3\xaf x=y";
  ProcessSpec cwd = Helper({"cwd"}, dir / "cwd.txt");
  cwd.cwd = dir.path();
  ProcessSpec affinity = Helper({"affinity"}, dir / "affinity.txt");
  affinity.cpu_affinity = {0};
  print.stderr_route.filtered = true;
  LaunchOptions options;
  options.console_stderr = fds[1];
  options.stderr_filters = {"err 1"};
  options.filtered_stderr_file = dir / "filtered.txt";
  auto group =
      ProcessLauncher::Default()->Start({print, env, cwd, affinity}, options);
  ASSERT_TRUE(group.ok()) << group.status();
  GroupStatus st = (*group)->Wait(kStartTimeout);
  ASSERT_EQ(st.state, GroupState::kSucceeded);
  st = (*group)->Stop(kSignalTerminate, absl::Seconds(1));
  // The log file has the bytes exactly (the partial last line too).
  EXPECT_EQ(ReadText(dir / "logs\\out.txt"), "out 0\nout 1\nout 2\npartial");
  EXPECT_EQ(ReadText(dir / "env.txt"), "\xc3\xbcn\xc3\xaf x=y\n");
  EXPECT_EQ(ReadText(dir / "cwd.txt"), dir.path() + "\n");
  EXPECT_EQ(ReadText(dir / "affinity.txt"), "1\n");
  // Only the matching line, prefixed, in the shared filtered file.
  EXPECT_EQ(ReadText(dir / "filtered.txt"), "[r0]:err 1\n");
  EXPECT_EQ(ExitOf(st, 0)->last_stderr_line, "err 2");
  _close(fds[1]);
  std::string console;
  char buf[4096];
  int n;
  while ((n = _read(fds[0], buf, sizeof(buf))) > 0) console.append(buf, n);
  _close(fds[0]);
  EXPECT_EQ(console, "[r0]:err 0\n[r0]:err 1\n[r0]:err 2\n");
}

TEST(ProcessLauncher, StopSetsTheStopEventThenTerminatesAfterTheGrace) {
  // wait-stop ends by itself on the stop event (the graceful path that needs
  // no console); ignore-stop ignores everything and is terminated when the
  // grace period is over. Neither depends on Ctrl-Break, which wine does not
  // deliver.
  TempDir dir;
  auto group = ProcessLauncher::Default()->Start(
      {Helper({"wait-stop"}, dir / "a.txt"),
       Helper({"ignore-stop"}, dir / "b.txt")},
      {});
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ReadText(dir / "a.txt") == "ready\n" &&
               ReadText(dir / "b.txt") == "ready\n";
      },
      kStartTimeout));
  const absl::Duration grace = absl::Seconds(3);
  const absl::Time start = absl::Now();
  GroupStatus st = (*group)->Stop(kSignalTerminate, grace);
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(st.exits.size(), 2u);
  EXPECT_EQ(st.state, GroupState::kFailed);
  const ProcessExit* graceful = ExitOf(st, 0);
  EXPECT_EQ(graceful->exit_code, 7);
  EXPECT_EQ(graceful->signal, 0);
  EXPECT_LT(graceful->end_time - start, grace);
  const ProcessExit* killed = ExitOf(st, 1);
  EXPECT_EQ(killed->exit_code, -1);
  EXPECT_EQ(killed->signal, kSignalKill);
  EXPECT_GE(took, grace);
  EXPECT_LT(took, grace + absl::Seconds(20));
}

TEST(ProcessLauncher, StopKillsTheWholeTreeThroughTheJob) {
  TempDir dir;
  auto group = ProcessLauncher::Default()->Start(
      {Helper({"tree", dir / "grandchild.pid"}, dir / "out.txt")}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitUntil([&] { return ReadText(dir / "out.txt") == "ready\n"; },
                        kStartTimeout));
  const DWORD grandchild =
      static_cast<DWORD>(std::stoul(ReadText(dir / "grandchild.pid")));
  windows::UniqueHandle gc(OpenProcess(SYNCHRONIZE, FALSE, grandchild));
  ASSERT_TRUE(gc.valid()) << windows::LastErrorText();
  ASSERT_EQ(WaitForSingleObject(gc.get(), 0), static_cast<DWORD>(WAIT_TIMEOUT));
  GroupStatus st = (*group)->Stop(kSignalTerminate, absl::Seconds(1));
  ASSERT_EQ(st.exits.size(), 1u);
  EXPECT_EQ(st.exits[0].signal, kSignalKill);
  // The grandchild went with its parent's job.
  EXPECT_EQ(WaitForSingleObject(gc.get(), 10000),
            static_cast<DWORD>(WAIT_OBJECT_0));
}

TEST(ProcessLauncher, KillingTheLauncherEndsItsWorkers) {
  // The helper runs a launcher (not in a job of ours: plain CreateProcessW),
  // which starts a worker in a kill-on-close job. TerminateProcess on the
  // launcher closes its job handles, and the worker goes with them.
  TempDir dir;
  const std::string pidfile = dir / "worker.pid";
  std::wstring cmd =
      windows::BuildCommandLine({HelperPath(), "launcher", pidfile});
  STARTUPINFOW si{};
  si.cb = sizeof(si);
  PROCESS_INFORMATION pi{};
  ASSERT_TRUE(CreateProcessW(nullptr, cmd.data(), nullptr, nullptr, FALSE, 0,
                             nullptr, nullptr, &si, &pi))
      << windows::LastErrorText();
  windows::UniqueHandle launcher(pi.hProcess);
  windows::UniqueHandle thread(pi.hThread);
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::string text = ReadText(pidfile);
        return !text.empty() && text.back() == '\n';
      },
      kStartTimeout));
  const DWORD worker_pid = static_cast<DWORD>(std::stoul(ReadText(pidfile)));
  windows::UniqueHandle worker(OpenProcess(SYNCHRONIZE, FALSE, worker_pid));
  ASSERT_TRUE(worker.valid()) << windows::LastErrorText();
  EXPECT_EQ(WaitForSingleObject(worker.get(), 0),
            static_cast<DWORD>(WAIT_TIMEOUT));
  ASSERT_TRUE(TerminateProcess(launcher.get(), 1));
  EXPECT_EQ(WaitForSingleObject(launcher.get(), 10000),
            static_cast<DWORD>(WAIT_OBJECT_0));
  EXPECT_EQ(WaitForSingleObject(worker.get(), 10000),
            static_cast<DWORD>(WAIT_OBJECT_0));
}

TEST(ProcessLauncher, KillEndsOneProcessWithItsReason) {
  auto group = ProcessLauncher::Default()->Start(
      {Helper({"sleep", "600000"}, ""), Helper({"sleep", "600000"}, "")}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_TRUE((*group)->Kill(1, "heartbeat lost"));
  GroupStatus st = (*group)->Wait(kStartTimeout);
  ASSERT_EQ(st.state, GroupState::kFailed);
  ASSERT_EQ(st.exits.size(), 1u);
  EXPECT_EQ(st.exits[0].index, 1u);
  EXPECT_EQ(st.exits[0].signal, kSignalKill);
  EXPECT_EQ(st.exits[0].kill_reason, "heartbeat lost");
  EXPECT_FALSE((*group)->Kill(1, "again"));
  st = (*group)->Stop(kSignalKill, absl::ZeroDuration());
  EXPECT_EQ(st.exits.size(), 2u);
}

TEST(ProcessLauncher, BadSpecsAreClearErrors) {
  auto none = ProcessLauncher::Default()->Start({}, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  ProcessSpec missing;
  missing.argv = {"no-such-program-muster"};
  missing.env = {{"PATH", "C:\\nowhere"}};
  auto r = ProcessLauncher::Default()->Start({missing}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("not found in PATH"));
  ProcessSpec bad_cwd = Helper({"exit", "0"}, "");
  bad_cwd.cwd = "C:\\no\\such\\dir";
  r = ProcessLauncher::Default()->Start({bad_cwd}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("working directory"));
  ProcessSpec bad_cpu = Helper({"exit", "0"}, "");
  bad_cpu.cpu_affinity = {200};
  r = ProcessLauncher::Default()->Start({bad_cpu}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("cannot bind"));
}

TEST(RunCommand, CapturesOutputAndEndsAtTheTimeout) {
  CommandSpec spec;
  spec.argv = {HelperPath(), "argv-hex", "a b"};
  spec.env = CurrentEnvironment();
  auto r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->output, "[612062]\n");

  spec.argv = {HelperPath(), "sleep", "600000"};
  spec.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, -1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace muster::platform
