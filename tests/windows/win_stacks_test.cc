// ReadNativeStacks on Windows (under wine): the stacks of a running
// win_worker.exe that hangs in named functions (--stacks-odd-rank), its gone
// and never-was processes told apart, and the worker still running after the
// read (every thread resumed).
#include <windows.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "muster/platform/stack_reader.h"
#include "platform/windows/win_util.h"
#include "tests/windows/win_test_util.h"

namespace muster::platform {
namespace {

using ::testing::HasSubstr;
using wintest::ReadText;
using wintest::TempDir;
using wintest::WaitUntil;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

// One worker of rank `rank` hanging in its named function, its output in
// `out_file`.
ProcessSpec Worker(int rank, int odd_rank, const std::string& out_file) {
  ProcessSpec spec;
  spec.argv = {wintest::BesideTest(L"win_worker.exe"),
               "--stacks-odd-rank=" + std::to_string(odd_rank)};
  spec.env = CurrentEnvironment();
  spec.env["RANK"] = std::to_string(rank);
  spec.stdout_route.console = false;
  spec.stdout_route.file = out_file;
  spec.stderr_route.console = false;
  return spec;
}

std::string Describe(const std::vector<NativeThreadStack>& threads) {
  std::string out;
  for (const NativeThreadStack& t : threads) {
    out += "thread " + std::to_string(t.tid) + " '" + t.name + "'" +
           (t.main ? " (main)" : "") + ":\n    " +
           absl::StrJoin(t.frames, "\n    ") + "\n";
  }
  return out;
}

bool HasFrame(const NativeThreadStack& t, const std::string& name) {
  return std::any_of(
      t.frames.begin(), t.frames.end(),
      [&](const std::string& f) { return f.find(name) != std::string::npos; });
}

// The stacks of a process that hangs in `function` (its main thread) and
// HelperThreadLoop_Muster (a thread named "muster-helper").
void ExpectStacks(int rank, int odd_rank, const std::string& function) {
  TempDir dir;
  auto group = ProcessLauncher::Default()->Start(
      {Worker(rank, odd_rank, dir / "out.txt")}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  const std::string ready = "waiting in " + function;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ReadText(dir / "out.txt").find(ready) != std::string::npos;
      },
      kStartTimeout))
      << ReadText(dir / "out.txt");
  const int pid = (*group)->pids().at(0);
  // The helper thread may not have reached its loop yet when the main
  // thread says it waits: read again until both are where they hang.
  absl::StatusOr<std::vector<NativeThreadStack>> threads;
  const bool found = WaitUntil(
      [&] {
        threads = ReadNativeStacks(pid);
        if (!threads.ok() || threads->empty()) return false;
        const NativeThreadStack& main = threads->front();
        return main.main && HasFrame(main, function) &&
               std::any_of(threads->begin(), threads->end(),
                           [](const NativeThreadStack& t) {
                             return HasFrame(t, "HelperThreadLoop_Muster");
                           });
      },
      absl::Seconds(30));
  ASSERT_TRUE(threads.ok()) << threads.status();
  ASSERT_TRUE(found) << Describe(*threads);
  std::printf("%s", Describe(*threads).c_str());  // for the log
  const NativeThreadStack& main = threads->front();
  // Names demangled, innermost first: Sleep's frames, then the function,
  // then main; the odd function absent from the others' stacks.
  EXPECT_FALSE(HasFrame(main, "_Z")) << Describe(*threads);
  EXPECT_TRUE(HasFrame(main, "muster_test::" + function + "()"))
      << Describe(*threads);
  auto at = std::find_if(main.frames.begin(), main.frames.end(),
                         [&](const std::string& f) {
                           return f.find(function) != std::string::npos;
                         });
  EXPECT_NE(std::find(at, main.frames.end(), "main"), main.frames.end())
      << "main is not below " << function << ":\n"
      << Describe(*threads);
  EXPECT_EQ(std::count_if(threads->begin(), threads->end(),
                          [](const NativeThreadStack& t) { return t.main; }),
            1)
      << Describe(*threads);
  for (const NativeThreadStack& t : *threads) {
    EXPECT_GT(t.tid, 0);
    EXPECT_FALSE(t.frames.empty()) << Describe(*threads);
    if (HasFrame(t, "HelperThreadLoop_Muster")) {
      EXPECT_FALSE(t.main);
      EXPECT_EQ(t.name, "muster-helper") << Describe(*threads);
    }
  }
  // Every thread was resumed: the worker still runs, and a second read
  // finds it where it was.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE((*group)->Poll().exits.empty());
  absl::StatusOr<std::vector<NativeThreadStack>> again = ReadNativeStacks(pid);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(HasFrame(again->front(), function)) << Describe(*again);
  (*group)->Stop(kSignalKill, absl::Seconds(1));
  (*group)->Wait(kStartTimeout);
}

TEST(ReadNativeStacks, NamesTheFunctionTheMainThreadWaitsIn) {
  ExpectStacks(/*rank=*/0, /*odd_rank=*/1, "WaitInBarrier_Muster");
}

TEST(ReadNativeStacks, NamesTheOddRanksFunction) {
  ExpectStacks(/*rank=*/1, /*odd_rank=*/1, "StuckInDataLoader_Muster");
}

TEST(ReadNativeStacks, AtMostMaxFrames) {
  TempDir dir;
  auto group =
      ProcessLauncher::Default()->Start({Worker(0, 1, dir / "out.txt")}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ReadText(dir / "out.txt").find("waiting in") !=
               std::string::npos;
      },
      kStartTimeout));
  absl::StatusOr<std::vector<NativeThreadStack>> threads =
      ReadNativeStacks((*group)->pids().at(0), 2);
  ASSERT_TRUE(threads.ok()) << threads.status();
  for (const NativeThreadStack& t : *threads) EXPECT_LE(t.frames.size(), 2u);
  (*group)->Stop(kSignalKill, absl::Seconds(1));
  (*group)->Wait(kStartTimeout);
}

TEST(ReadNativeStacks, GoneProcessIsNotFound) {
  TempDir dir;
  auto group =
      ProcessLauncher::Default()->Start({Worker(0, 1, dir / "out.txt")}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  const int pid = (*group)->pids().at(0);
  (*group)->Stop(kSignalKill, absl::Seconds(1));
  (*group)->Wait(kStartTimeout);
  // The group may still hold the ended process's handle: a process object
  // that lingers is gone all the same.
  absl::StatusOr<std::vector<NativeThreadStack>> threads =
      ReadNativeStacks(pid);
  EXPECT_EQ(threads.status().code(), absl::StatusCode::kNotFound)
      << threads.status();
  group->reset();
  // A pid no process has (Windows pids are multiples of 4).
  threads = ReadNativeStacks(0x7ffffffc);
  EXPECT_EQ(threads.status().code(), absl::StatusCode::kNotFound)
      << threads.status();
  EXPECT_THAT(threads.status().message(), HasSubstr("is gone"));
}

// Windows has no signal for Python's faulthandler: the bootstrap's event
// instead (win_python_stacks_test); a process without one is UNAVAILABLE.
TEST(StacksSignal, AnEventOnWindows) {
  EXPECT_EQ(StacksSignal(), 0);
  EXPECT_EQ(StacksEventPrefix(), "Local\\muster-stacks-");
  const absl::Status s =
      SignalForStacks(static_cast<int>(GetCurrentProcessId()));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("has no stacks event"));
}

}  // namespace
}  // namespace muster::platform
