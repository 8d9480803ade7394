// torchrun 2.x parity, end to end (issue 16; docs/migrating-from-torchrun.md):
// real `muster` processes running shell, Python and torch workers. Each
// torchrun 2.x flag does what torchrun's does; the interpreter is the one the
// user chose (and named when a module is missing); a failing @record worker's
// traceback is in the summary; kill -9 of the launcher leaves no process of the
// job, grandchildren that ignore SIGHUP and setsid'd ones included. Every wait
// has a deadline; leftovers are killed at the end of each test.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tcp_listener.h"

namespace muster {
namespace {

using ::muster::testing::AllExited;
using ::muster::testing::BinPath;
using ::muster::testing::MakeTempDir;
using ::muster::testing::ProcessAlive;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kJobDeadline = absl::Seconds(90);
constexpr char kTorchPython[] = "/usr/bin/python3";

std::vector<std::string> Muster(const std::vector<std::string>& flags) {
  return ::muster::testing::MusterArgv(flags);
}

// DIR/worker.sh, a shell script running `body`; $PARITY_DIR is where tests
// pass it a folder.
std::string WriteWorker(const std::string& dir, const std::string& body) {
  return testing::WriteFile(dir + "/worker.sh", "#!/bin/sh\n" + body, 0755);
}

// The pid in DIR/NAME, or 0.
pid_t PidIn(const std::string& dir, const std::string& name) {
  int pid = 0;
  std::string text(
      absl::StripAsciiWhitespace(testing::ReadFile(dir + "/" + name)));
  return absl::SimpleAtoi(text, &pid) ? pid : 0;
}

bool TorchAvailable() {
  return access(kTorchPython, X_OK) == 0 &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// --- kill -9 of the launcher (item 6)

// A worker that starts a grandchild that ignores SIGHUP in its own process
// group, and one that leaves the group (setsid) as a daemon would; each writes
// its pid to $PARITY_DIR.
constexpr char kWorkerWithDescendants[] =
    "(trap '' HUP; exec sleep 300) &\n"
    "echo $! > \"$PARITY_DIR/grandchild_$LOCAL_RANK\"\n"
    "setsid sh -c 'trap \"\" HUP; exec sleep 301' &\n"
    "echo $! > \"$PARITY_DIR/daemon_$LOCAL_RANK\"\n"
    "echo $$ > \"$PARITY_DIR/worker_$LOCAL_RANK\"\n"
    "exec sleep 302\n";

// The pids that the workers here wrote to `dir`: worker_R, grandchild_R and
// daemon_R for local ranks 0 and 1 (those written so far).
std::vector<pid_t> JobPids(const std::string& dir) {
  std::vector<pid_t> pids;
  for (const char* kind : {"worker_", "grandchild_", "daemon_"}) {
    for (int r = 0; r < 2; ++r) {
      if (pid_t pid = PidIn(dir, absl::StrCat(kind, r)); pid > 0)
        pids.push_back(pid);
    }
  }
  return pids;
}

// Expects every pid gone within 10 s; kills (and names) the survivors.
void ExpectAllGone(const std::vector<pid_t>& pids, const std::string& after,
                   const std::string& output) {
  const bool all_gone = AllExited(pids, absl::Seconds(10));
  std::string alive;
  for (pid_t pid : pids) {
    if (ProcessAlive(pid)) {
      absl::StrAppend(&alive, " ", pid);
      kill(pid, SIGKILL);
    }
  }
  EXPECT_TRUE(all_gone) << "still running after " << after << ":" << alive
                        << "\n"
                        << output;
}

TEST(ParityE2eTest, KillNineOfTheLauncherLeavesNoProcessOfTheJob) {
  const std::string dir = MakeTempDir("kill9");
  const std::string worker = WriteWorker(dir, kWorkerWithDescendants);
  Subprocess p(Muster({"--nproc-per-node=2", "--no-python", worker}),
               {{"PARITY_DIR", dir}});
  std::vector<pid_t> pids;
  ASSERT_TRUE(WaitUntil(
      [&] {
        pids = JobPids(dir);
        return pids.size() == 6;
      },
      absl::Seconds(30)))
      << p.Output();
  for (pid_t pid : pids) ASSERT_TRUE(ProcessAlive(pid)) << pid;

  kill(p.pid(), SIGKILL);
  EXPECT_TRUE(p.Wait(absl::Seconds(10)).has_value());
  ExpectAllGone(pids, "kill -9 of the launcher", p.Output());
}

// Issue 11 item 5: when the job fails (a worker exits non-zero, no restarts
// left), the launcher stops the other workers and their descendants too: a
// grandchild that ignores SIGTERM and SIGHUP (killed after the grace
// period) and one that left the process group with setsid.
constexpr char kFailingWorkerWithDescendants[] =
    "(trap '' HUP TERM; exec sleep 300) &\n"
    "echo $! > \"$PARITY_DIR/grandchild_$LOCAL_RANK\"\n"
    "setsid sh -c 'trap \"\" HUP TERM; exec sleep 301' &\n"
    "echo $! > \"$PARITY_DIR/daemon_$LOCAL_RANK\"\n"
    "echo $$ > \"$PARITY_DIR/worker_$LOCAL_RANK\"\n"
    "if [ \"$LOCAL_RANK\" = 1 ]; then\n"
    "  while [ ! -s \"$PARITY_DIR/worker_0\" ]; do sleep 0.05; done\n"
    "  exit 7\n"
    "fi\n"
    "exec sleep 302\n";

TEST(ParityE2eTest, FailedJobLeavesNoGrandchildOfAnyWorker) {
  const std::string dir = MakeTempDir("failgc");
  const std::string worker = WriteWorker(dir, kFailingWorkerWithDescendants);
  Subprocess p(Muster({"--nproc-per-node=2", "--max-restarts=0",
                       "--shutdown-timeout=1", "--no-python", worker}),
               {{"PARITY_DIR", dir}});
  const std::optional<int> rc = p.Wait(kJobDeadline);
  ASSERT_TRUE(rc.has_value()) << "the failed job did not end\n" << p.Output();
  EXPECT_NE(*rc, 0) << p.Output();
  EXPECT_THAT(p.Output(), HasSubstr("exited with code 7"));
  const std::vector<pid_t> pids = JobPids(dir);
  EXPECT_EQ(pids.size(), 6u) << "not every process started\n" << p.Output();
  ExpectAllGone(pids, "the job failed", p.Output());
}

// --- the Python interpreter (item 1)

class PythonInterpreterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!TorchAvailable()) GTEST_SKIP() << "needs torch for /usr/bin/python3";
    dir_ = MakeTempDir("python");
    // A python3 on PATH without torch, as pyenv's was: a virtual environment
    // without the system's packages.
    ASSERT_EQ(system(absl::StrCat(kTorchPython, " -m venv --without-pip ", dir_,
                                  "/venv")
                         .c_str()),
              0);
    // A pyenv-like shim in front of it: a script that adds PYENV_* and runs
    // the interpreter.
    std::filesystem::create_directories(dir_ + "/shims");
    testing::WriteFile(
        dir_ + "/shims/python3",
        absl::StrCat("#!/bin/sh\nexport PYENV_VERSION=parity\nexec ", dir_,
                     "/venv/bin/python3 \"$@\"\n"),
        0755);
    script_ = testing::WriteFile(dir_ + "/train.py",
                                 "import os, sys\n"
                                 "print('python', sys.executable, "
                                 "os.environ.get('PYENV_VERSION', '-'))\n"
                                 "import torch\n"
                                 "print('torch', torch.__version__, "
                                 "os.environ['RANK'])\n",
                                 0644);
    path_ = absl::StrCat(dir_, "/shims:", getenv("PATH"));
  }

  std::string dir_, script_, path_;
};

TEST_F(PythonInterpreterTest, WithoutAChoiceTheSummaryNamesTheInterpreter) {
  Subprocess p(Muster({"--nproc-per-node=1", script_}),
               {{"PATH", path_}, {"PYTHON_EXEC", ""}});
  EXPECT_EQ(p.WaitOrKill(kJobDeadline), 1) << p.Output();
  const std::string out = p.Output();
  const std::string venv_python = dir_ + "/venv/bin/python3";
  // The shim was resolved once: the worker ran the interpreter itself, without
  // the shim's PYENV_ variable.
  EXPECT_THAT(out, HasSubstr(absl::StrCat("workers run Python ", venv_python,
                                          " (python3 from PATH, via ", dir_,
                                          "/shims/python3)")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("python ", venv_python, " -")));
  EXPECT_THAT(out, HasSubstr("ModuleNotFoundError: No module named 'torch'"));
  EXPECT_THAT(out,
              HasSubstr(absl::StrCat("the workers ran Python ", venv_python,
                                     " (python3 from PATH)")));
  EXPECT_THAT(out, HasSubstr("--python=PATH or PYTHON_EXEC=PATH"));
}

TEST_F(PythonInterpreterTest, PythonFlagOrPythonExecRunsTheUnchangedScript) {
  Subprocess flag(
      Muster({"--nproc-per-node=1", "--python", kTorchPython, script_}),
      {{"PATH", path_}, {"PYTHON_EXEC", ""}});
  Subprocess exec(Muster({"--nproc-per-node=1", script_}),
                  {{"PATH", path_}, {"PYTHON_EXEC", kTorchPython}});
  EXPECT_EQ(flag.WaitOrKill(kJobDeadline), 0) << flag.Output();
  EXPECT_EQ(exec.WaitOrKill(kJobDeadline), 0) << exec.Output();
  // torchrun's console: the worker's line as it wrote it.
  EXPECT_THAT(flag.Output(), HasSubstr("\ntorch "));
  EXPECT_THAT(flag.Output(), HasSubstr("(--python)"));
  EXPECT_THAT(exec.Output(), HasSubstr("\ntorch "));
  EXPECT_THAT(exec.Output(), HasSubstr("(PYTHON_EXEC)"));
}

// --- the traceback of a failing @record worker (item 5)

TEST(ParityE2eTest, RecordWorkersTracebackIsInTheSummary) {
  if (!TorchAvailable()) GTEST_SKIP() << "needs torch for /usr/bin/python3";
  const std::string dir = MakeTempDir("record");
  const std::string script = testing::WriteFile(
      dir + "/fail.py",
      "from torch.distributed.elastic.multiprocessing.errors import record\n"
      "def load_shard(n):\n"
      "    raise ValueError(f'shard {n} is corrupt')\n"
      "@record\n"
      "def main():\n"
      "    load_shard(7)\n"
      "if __name__ == '__main__':\n"
      "    main()\n",
      0644);
  Subprocess p(Muster({"--nproc-per-node=1", script}),
               {{"PYTHON_EXEC", kTorchPython}});
  EXPECT_EQ(p.WaitOrKill(kJobDeadline), 1) << p.Output();
  const std::string out = p.Output();
  const size_t summary = out.find("FAILED");
  ASSERT_NE(summary, std::string::npos) << out;
  const std::string tail = out.substr(summary);
  EXPECT_THAT(tail, HasSubstr("error: ValueError: shard 7 is corrupt")) << out;
  EXPECT_THAT(tail, HasSubstr("traceback:")) << out;
  EXPECT_THAT(tail, HasSubstr("Traceback (most recent call last):")) << out;
  EXPECT_THAT(tail, HasSubstr("in load_shard")) << out;
}

// --- flags (item 2)

TEST(ParityE2eTest, SignalsToHandleForwardsTheListedSignal) {
  const std::string dir = MakeTempDir("signals");
  const std::string worker =
      WriteWorker(dir,
                  "trap 'echo got USR1; exit 7' USR1\n"
                  "echo $$ > \"$PARITY_DIR/worker_$LOCAL_RANK\"\n"
                  "while :; do sleep 0.1; done\n");
  for (const char* spelling :
       {"--signals-to-handle=SIGTERM,SIGUSR1", "--signals_to_handle=USR1"}) {
    SCOPED_TRACE(spelling);
    std::filesystem::remove(dir + "/worker_0");
    Subprocess p(Muster({spelling, "--no-python", worker}),
                 {{"PARITY_DIR", dir}});
    ASSERT_TRUE(WaitUntil([&] { return PidIn(dir, "worker_0") > 0; },
                          absl::Seconds(30)))
        << p.Output();
    kill(p.pid(), SIGUSR1);
    EXPECT_EQ(p.WaitOrKill(absl::Seconds(30)), 128 + SIGUSR1) << p.Output();
    EXPECT_THAT(p.Output(), HasSubstr("\ngot USR1\n"));
  }
}

TEST(ParityE2eTest, ShutdownTimeoutIsTheGracePeriod) {
  // A worker that ignores SIGTERM is killed after --shutdown-timeout, not
  // after torchrun's 30 s default.
  const std::string pids = MakeTempDir("grace");
  Subprocess p(
      Muster({"--shutdown_timeout=1", "--no-python", BinPath("test_worker"),
              "--pid-dir=" + pids, "--sleep=120", "--ignore-sigterm"}));
  ASSERT_TRUE(WaitUntil([&] { return !testing::PidsInDir(pids).empty(); },
                        absl::Seconds(30)))
      << p.Output();
  const absl::Time start = absl::Now();
  p.Signal(SIGTERM);
  EXPECT_EQ(p.WaitOrKill(absl::Seconds(25)), 128 + SIGTERM) << p.Output();
  EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << p.Output();
  EXPECT_THAT(p.Output(), HasSubstr("still running 1s after signal"));
}

TEST(ParityE2eTest, DuplicateFiltersCopyMatchingTeedLines) {
  const std::string logs = MakeTempDir("filters");
  Subprocess p(
      Muster({"--nproc-per-node=2", "--log-dir", logs, "--tee=3",
              "--duplicate-stdout-filters=loss,,x", "--no-python", "/bin/sh",
              "-c", "echo step=$RANK; echo loss,x=$RANK; echo other >&2"}));
  ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  std::string filtered;
  for (const auto& e : std::filesystem::recursive_directory_iterator(logs)) {
    if (e.path().filename() == "filtered_stdout.log")
      filtered = testing::ReadFile(e.path().string());
    EXPECT_NE(e.path().filename(), "filtered_stderr.log");
  }
  // With the prefix of the teed line: torchrun's "[<role><local rank>]:".
  EXPECT_THAT(filtered, HasSubstr("[default0]:loss,x=0\n"));
  EXPECT_THAT(filtered, HasSubstr("[default1]:loss,x=1\n"));
  EXPECT_THAT(filtered, Not(HasSubstr("step=")));
}

TEST(ParityE2eTest, VirtualLocalRankAndTorchrunsEnvironment) {
  Subprocess p(
      Muster({"--nproc-per-node=2", "--virtual_local_rank", "--prefix-output",
              "--no-python", BinPath("test_worker"), "--print-env"}),
      {{"CUDA_VISIBLE_DEVICES", "4,6"}});
  ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_THAT(out, HasSubstr("[rank0]:env LOCAL_RANK=0\n"));
  EXPECT_THAT(out, HasSubstr("[rank1]:env LOCAL_RANK=0\n"));
  EXPECT_THAT(out, HasSubstr("[rank0]:env CUDA_VISIBLE_DEVICES=4\n"));
  EXPECT_THAT(out, HasSubstr("[rank1]:env CUDA_VISIBLE_DEVICES=6\n"));
  // Item 3: both spellings of async error handling; torchrun's run id "none"
  // for one node without --standalone.
  EXPECT_THAT(out, HasSubstr("[rank1]:env NCCL_ASYNC_ERROR_HANDLING=1\n"));
  EXPECT_THAT(out,
              HasSubstr("[rank1]:env TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n"));
  EXPECT_THAT(out, HasSubstr("[rank1]:env TORCHELASTIC_RUN_ID=none\n"));
}

TEST(ParityE2eTest, NumaBindingRunsEverywhere) {
  // Bound where the machine has GPUs with NUMA nodes; elsewhere one warning
  // that says why, and the job runs.
  Subprocess p(Muster({"--numa_binding=node", "--nproc-per-node=2",
                       "--prefix_output", "--no-python", "/bin/sh", "-c",
                       "grep Cpus_allowed_list /proc/self/status"}));
  ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  const std::string out = p.Output();
  if (out.find("workers run without binding") == std::string::npos) {
    EXPECT_THAT(out, HasSubstr("--numa-binding=node: local rank 1 on CPUs"));
  } else {
    EXPECT_THAT(out, HasSubstr("--numa-binding=node: "));
  }
  EXPECT_THAT(out, HasSubstr("[rank1]:Cpus_allowed_list:"));
}

TEST(ParityE2eTest, ConsoleEventLogHandlerPrintsTorchelasticEvents) {
  Subprocess p(
      Muster({"--event-log-handler=console", "--no-python", "/bin/true"}));
  ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  EXPECT_THAT(p.Output(),
              HasSubstr("\"name\":\"torchelastic.worker.status.SUCCEEDED\""));
  Subprocess quiet(Muster({"--no-python", "/bin/true"}));
  ASSERT_EQ(quiet.WaitOrKill(kJobDeadline), 0) << quiet.Output();
  EXPECT_THAT(quiet.Output(), Not(HasSubstr("torchelastic.worker.status")));
}

// --- minor (item 7)

TEST(ParityE2eTest, ScriptWithoutRunBitOrExtensionRunsWithPython) {
  const std::string dir = MakeTempDir("noext");
  const std::string script = testing::WriteFile(
      dir + "/train", "import os\nprint('ran', os.environ['RANK'])\n", 0644);
  Subprocess p(Muster({"--start-method=fork", script}),
               {{"PYTHON_EXEC", kTorchPython}});
  ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  EXPECT_THAT(p.Output(), HasSubstr("\nran 0\n"));
  EXPECT_THAT(p.Output(), HasSubstr("--start-method=fork has no effect"));
}

TEST(ParityE2eTest, PortInUseIsReportedWithoutARawGrpcLine) {
  // Node rank 0 of a static job whose rendezvous port is taken.
  // The wildcard address, as the server binds it (a socket on 127.0.0.1
  // alone does not stop a wildcard bind).
  ::muster::testing::TcpListener taken("0.0.0.0");
  ASSERT_TRUE(taken.ok());
  const int port = taken.port();
  Subprocess p(Muster({"--nnodes=1", "--node-rank=0", "--master-addr=127.0.0.1",
                       absl::StrCat("--rdzv-endpoint=127.0.0.1:", port),
                       "--no-python", "/bin/true"}));
  const int rc = p.WaitOrKill(kJobDeadline);
  taken.Close();
  EXPECT_EQ(rc, 2) << p.Output();
  EXPECT_THAT(p.Output(), HasSubstr("in use"));
  EXPECT_THAT(p.Output(), HasSubstr("--rdzv-endpoint"));
  EXPECT_THAT(p.Output(), Not(HasSubstr("chttp2")));
  EXPECT_THAT(p.Output(), Not(HasSubstr("UNKNOWN:")));
}

TEST(ParityE2eTest, DoctorProbesStaticModesSecondPort) {
  // Item 4: static mode needs node rank 0's rendezvous port besides
  // --master-port; doctor names and probes both.
  Subprocess p(Muster({"doctor", "--master-addr=127.0.0.1",
                       absl::StrCat("--master-port=", testing::FreePort()),
                       "--timeout=2"}));
  p.WaitOrKill(kJobDeadline);
  EXPECT_THAT(p.Output(), HasSubstr("static rdzv 127.0.0.1:29400 (muster's "
                                    "second port on node rank 0)"))
      << p.Output();
}

}  // namespace
}  // namespace muster
