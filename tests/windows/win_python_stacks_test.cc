// The agent's capture of a Python worker's stacks on Windows (under wine,
// which has no Windows Python here): win_worker.exe --fake-python-stacks plays
// the Python bootstrap (agent/src/python_prelude.cc) and its protocol (the
// event StacksEventPrefix() + pid, the ready line, a faulthandler-style dump
// from a watcher thread); CaptureWorker sets the event and parses the dump,
// or reads the native stacks when no dump comes (a thread holding the GIL).
#include <windows.h>

#include <map>
#include <string>
#include <vector>

#include "agent/src/stack_capture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "muster/platform/stack_reader.h"
#include "tests/windows/win_test_util.h"

namespace muster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using wintest::ReadText;
using wintest::TempDir;
using wintest::WaitUntil;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

// A fake Python worker of rank 0 (the odd one: stuck_in_data_loader) whose
// bootstrap is ready; stopped at the end.
class FakePythonWorker {
 public:
  FakePythonWorker(const TempDir& dir, const std::string& mode) {
    stacks_file_ = dir / "stacks.txt";
    platform::ProcessSpec spec;
    spec.argv = {wintest::BesideTest(L"win_worker.exe"), "--stacks-odd-rank=0",
                 "--fake-python-stacks=" + mode};
    spec.env = platform::CurrentEnvironment();
    spec.env["RANK"] = "0";
    AddStacksEnv(stacks_file_, &spec.env);
    spec.stdout_route.console = false;
    spec.stdout_route.file = dir / "out.txt";
    spec.stderr_route.console = false;
    auto group = platform::ProcessLauncher::Default()->Start({spec}, {});
    EXPECT_TRUE(group.ok()) << group.status();
    if (!group.ok()) return;
    group_ = std::move(*group);
    ready_ = WaitUntil(
        [&] {
          return ReadText(stacks_file_).find(kStacksReadyMarker) !=
                     std::string::npos &&
                 ReadText(dir / "out.txt").find("waiting in") !=
                     std::string::npos;
        },
        kStartTimeout);
  }
  ~FakePythonWorker() {
    if (group_ == nullptr) return;
    group_->Stop(platform::kSignalKill, absl::Seconds(1));
    group_->Wait(kStartTimeout);
  }
  bool ready() const { return ready_; }
  CaptureTarget target() const {
    CaptureTarget t;
    t.pid = group_->pids().at(0);
    t.python_dump_file = stacks_file_;
    return t;
  }
  bool running() { return group_->Poll().exits.empty(); }

 private:
  std::string stacks_file_;
  std::unique_ptr<platform::ProcessGroup> group_;
  bool ready_ = false;
};

TEST(PythonStacksOnWindows, TheEventBringsTheDump) {
  std::map<std::string, std::string> env;
  AddStacksEnv("C:\\logs\\stacks.txt", &env);
  EXPECT_EQ(env[kStacksEventVariable], platform::StacksEventPrefix());
  EXPECT_EQ(env.count(kStacksSignalVariable), 0u);
  TempDir dir;
  FakePythonWorker worker(dir, "dump");
  ASSERT_TRUE(worker.ready()) << ReadText(dir / "out.txt");
  const v1::RankStacks r =
      CaptureWorker(worker.target(), absl::Now() + absl::Seconds(10));
  EXPECT_EQ(r.kind(), "python");
  EXPECT_EQ(r.error(), "");
  // The main thread first; the watcher (the dump's "Current thread") left
  // out; the bootstrap's runpy frame too.
  ASSERT_EQ(r.threads_size(), 2) << r.DebugString();
  EXPECT_TRUE(r.threads(0).main());
  EXPECT_THAT(r.threads(0).frames(),
              ElementsAre("stuck_in_data_loader", "<module>"));
  EXPECT_THAT(r.threads(1).frames(), ElementsAre("background_prefetch"));
  // Again: the event is auto-reset, the watcher waits for the next one.
  const v1::RankStacks again =
      CaptureWorker(worker.target(), absl::Now() + absl::Seconds(10));
  EXPECT_EQ(again.kind(), "python");
  EXPECT_EQ(again.threads_size(), 2) << again.DebugString();
  EXPECT_TRUE(worker.running());
}

TEST(PythonStacksOnWindows, NoDumpMeansTheNativeStacks) {
  TempDir dir;
  FakePythonWorker worker(dir, "mute");
  ASSERT_TRUE(worker.ready()) << ReadText(dir / "out.txt");
  const v1::RankStacks r =
      CaptureWorker(worker.target(), absl::Now() + absl::Seconds(20));
  EXPECT_EQ(r.kind(), "native");
  EXPECT_EQ(r.error(), "");
  ASSERT_GT(r.threads_size(), 0);
  std::string main_frames;
  for (const std::string& f : r.threads(0).frames()) main_frames += f + "\n";
  EXPECT_THAT(main_frames,
              HasSubstr("muster_test::StuckInDataLoader_Muster()"));
}

}  // namespace
}  // namespace muster::agent
