// PyTorch's own launcher tests (test/distributed/launcher/test_run.py), as
// command lines a new user would type (issue 30): the behaviours where muster
// differed from torchrun 2.x, each with both flag spellings where a flag is
// involved. Real `muster` processes; shell workers, and torch 1.13 workers
// where /usr/bin/python3 has torch. Every wait has a deadline.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::MakeTempDir;
using ::muster::testing::Subprocess;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Not;
using ::testing::StartsWith;

constexpr absl::Duration kJobDeadline = absl::Seconds(90);
constexpr char kTorchPython[] = "/usr/bin/python3";

std::vector<std::string> Muster(const std::vector<std::string>& flags) {
  return ::muster::testing::MusterArgv(flags);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  return lines;
}

bool TorchAvailable() {
  return access(kTorchPython, X_OK) == 0 &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// Both spellings of --nproc-per-node, which every case below passes.
const char* const kNproc[] = {"--nproc-per-node=2", "--nproc_per_node=2"};

// A worker writing one line to each stream.
const std::vector<std::string> kEcho = {"--no-python", "/bin/sh", "-c",
                                        "echo out$RANK; echo err$RANK >&2"};

std::vector<std::string> With(std::vector<std::string> a,
                              const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Item 3: the console as torchrun's, byte for byte.
TEST(TorchrunSuiteE2eTest, WorkerOutputWithoutRedirectsIsTheWorkersOwn) {
  for (const char* nproc : kNproc) {
    SCOPED_TRACE(nproc);
    Subprocess p(Muster(With({nproc}, kEcho)));
    ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
    EXPECT_THAT(Lines(p.Output()),
                IsSupersetOf({"out0", "out1", "err0", "err1"}))
        << p.Output();
    EXPECT_THAT(p.Output(), Not(HasSubstr("[rank")));
  }
}

TEST(TorchrunSuiteE2eTest, TeedLinesCarryTorchrunsHeader) {
  for (const char* nproc : kNproc) {
    SCOPED_TRACE(nproc);
    const std::string logs = MakeTempDir("tee-header");
    // -t 1: stdout teed with the header, stderr as written.
    Subprocess p(Muster(
        With({nproc, "--log-dir", logs, "--tee=1", "--role=trainer"}, kEcho)));
    ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
    EXPECT_THAT(
        Lines(p.Output()),
        IsSupersetOf({"[trainer0]:out0", "[trainer1]:out1", "err0", "err1"}))
        << p.Output();
  }
}

// test_capture_logs_using_default_logs_specs: --redirect=3 (an abbreviation
// of --redirects, item 2) --tee=3 and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
TEST(TorchrunSuiteE2eTest, CaptureLogsWithThePrefixTemplate) {
  for (const char* nproc : kNproc) {
    SCOPED_TRACE(nproc);
    Subprocess p(
        Muster(With({nproc, "--rdzv-id=capture", "--redirect=3", "--tee=3",
                     "--monitor-interval=1", "--start-method=spawn"},
                    kEcho)),
        {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]: "}});
    ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
    EXPECT_THAT(Lines(p.Output()),
                IsSupersetOf({"[rank0]: out0", "[rank1]: out1", "[rank0]: err0",
                              "[rank1]: err1"}))
        << p.Output();
    EXPECT_THAT(p.Output(), HasSubstr("--redirect taken as --redirects"));
  }
  // An ambiguous abbreviation names what it could be.
  Subprocess bad(Muster({"--no", "/bin/true"}));
  EXPECT_EQ(bad.WaitOrKill(kJobDeadline), 2) << bad.Output();
  EXPECT_THAT(bad.Output(),
              HasSubstr("ambiguous flag --no: it abbreviates --node-rank, "
                        "--no-preflight, --no-python"));
}

// --prefix-output: muster's "[rank<global rank>]:" on every console line.
TEST(TorchrunSuiteE2eTest, PrefixOutputKeepsMustersRankPrefix) {
  for (const char* flag : {"--prefix-output", "--prefix_output"}) {
    SCOPED_TRACE(flag);
    Subprocess p(Muster(With({"--nproc-per-node=2", flag}, kEcho)));
    ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
    EXPECT_THAT(Lines(p.Output()),
                IsSupersetOf({"[rank0]:out0", "[rank1]:out1", "[rank0]:err0",
                              "[rank1]:err1"}))
        << p.Output();
  }
}

// Item 4: <log-dir>/<run-id>_<random>/attempt_<n>/<local rank>/, a new
// folder per run.
TEST(TorchrunSuiteE2eTest, EveryRunGetsItsOwnLogFolder) {
  const std::string logs = MakeTempDir("log-layout");
  for (const char* nproc : kNproc) {
    SCOPED_TRACE(nproc);
    Subprocess p(Muster(
        With({nproc, "--log_dir=" + logs, "--rdzv-id=same", "--redirects=3"},
             kEcho)));
    ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  }
  std::vector<std::string> runs;
  for (const auto& e : std::filesystem::directory_iterator(logs)) {
    runs.push_back(e.path().filename().string());
  }
  ASSERT_EQ(runs.size(), 2u);
  for (const std::string& run : runs) {
    EXPECT_THAT(run, StartsWith("same_"));
    EXPECT_GT(run.size(), std::string("same_").size());
    for (int local : {0, 1}) {
      const std::string dir =
          absl::StrCat(logs, "/", run, "/attempt_0/", local, "/");
      EXPECT_EQ(testing::ReadFile(dir + "stdout.log"),
                absl::StrCat("out", local, "\n"));
      EXPECT_EQ(testing::ReadFile(dir + "stderr.log"),
                absl::StrCat("err", local, "\n"));
    }
  }
}

// Items 1 and 5: test_launch_elastic's command line, with the free port
// picked by muster (port 0) and the shell's quotes inside --rdzv-conf.
TEST(TorchrunSuiteE2eTest, LaunchElasticOnPortZeroWithQuotedRdzvConf) {
  for (const char* nproc : kNproc) {
    for (const char* conf : {"--rdzv-conf", "--rdzv_conf"}) {
      SCOPED_TRACE(absl::StrCat(nproc, " ", conf));
      Subprocess p(Muster(
          {"--nnodes=1:2", nproc, "--rdzv-backend=c10d",
           "--rdzv_endpoint=localhost:0",
           absl::StrCat(conf,
                        "='join_timeout=5,last_call_timeout=1,timeout=5'"),
           "--rdzv-id=elastic", "--monitor-interval=1", "--start-method=spawn",
           "--prefix-output", "--no-python", BinPath("test_worker")}));
      ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
      EXPECT_THAT(p.Output(), HasSubstr("[rank1]:test_worker rank 1 done"));
      EXPECT_THAT(p.Output(), HasSubstr("ignoring key 'timeout'"));
      EXPECT_THAT(p.Output(), HasSubstr("rendezvous server on localhost:"));
    }
  }
  // Port 0 of another machine cannot be anyone's.
  Subprocess far(Muster({"--nnodes=1:2", "--rdzv-endpoint=192.0.2.1:0",
                         "--rdzv-id=far", "--no-python", "/bin/true"}));
  EXPECT_EQ(far.WaitOrKill(kJobDeadline), 2) << far.Output();
  EXPECT_THAT(far.Output(), HasSubstr("is not this machine"));
}

// Item 6: test_launch_run_path and test_is_torchelastic_launched: the script
// runs through runpy in the worker, as __main__ with torchrun's sys.argv; its
// atexit handlers run; sys.exit's code is the worker's; an exception is
// recorded in the error file (the summary shows it).
TEST(TorchrunSuiteE2eTest, RunPathRunsTheScriptAsTorchrunDoes) {
  if (!TorchAvailable()) GTEST_SKIP() << "needs torch for /usr/bin/python3";
  const std::string dir = MakeTempDir("run-path");
  const std::string script = testing::WriteFile(
      dir + "/train",  // no .py, no run bit: --run-path runs it with Python
      "import atexit, os, sys\n"
      "import torch.distributed as dist\n"
      "assert __name__ == '__main__', __name__\n"
      "out = sys.argv[1]\n"
      "atexit.register(lambda: open(out + '.atexit' + os.environ['RANK'], "
      "'w').close())\n"
      "dist.init_process_group('gloo')\n"
      "t = __import__('torch').ones(1)\n"
      "dist.all_reduce(t)\n"
      "with open(out + os.environ['RANK'], 'w') as f:\n"
      "    f.write('%s %s %d' % (dist.is_torchelastic_launched(), "
      "os.path.basename(sys.argv[0]), int(t.item())))\n"
      "print('rank', os.environ['RANK'], 'done')\n"
      "if len(sys.argv) > 2 and sys.argv[2] == 'exit3':\n"
      "    sys.exit(3)\n"
      "if len(sys.argv) > 2 and sys.argv[2] == 'raise':\n"
      "    raise ValueError('bad shard')\n",
      0644);
  for (const char* nproc : kNproc) {
    SCOPED_TRACE(nproc);
    Subprocess p(
        Muster({"--run-path", "--nnodes=1", nproc, "--monitor-interval=1",
                "--start-method=spawn", script, dir + "/out"}),
        {{"PYTHON_EXEC", kTorchPython}});
    ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
    for (int r : {0, 1}) {
      EXPECT_EQ(testing::ReadFile(absl::StrCat(dir, "/out", r)),
                "True train 2");
      EXPECT_TRUE(std::filesystem::exists(absl::StrCat(dir, "/out.atexit", r)));
    }
    EXPECT_THAT(Lines(p.Output()), Contains("rank 1 done"));
  }
  Subprocess exit3(Muster({"--run_path", "--nproc-per-node=1", script,
                           dir + "/out", "exit3"}),
                   {{"PYTHON_EXEC", kTorchPython}});
  EXPECT_EQ(exit3.WaitOrKill(kJobDeadline), 1) << exit3.Output();
  EXPECT_THAT(exit3.Output(), HasSubstr("exited with code 3"))
      << exit3.Output();
  Subprocess raise(Muster({"--run-path", "--nproc-per-node=1", script,
                           dir + "/out", "raise"}),
                   {{"PYTHON_EXEC", kTorchPython}});
  EXPECT_EQ(raise.WaitOrKill(kJobDeadline), 1) << raise.Output();
  EXPECT_THAT(raise.Output(), HasSubstr("ValueError: bad shard"));
}

}  // namespace
}  // namespace muster
