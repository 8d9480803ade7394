// Tests of the POSIX WorkerGroup with real processes (build/bin/test_worker,
// sh, sleep).
#include "muster/agent/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace muster::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::string TestWorker() {
  if (const char* dir = getenv("MUSTER_BIN_DIR");
      dir != nullptr && *dir != '\0') {
    return absl::StrCat(dir, "/test_worker");
  }
  return (fs::read_symlink("/proc/self/exe").parent_path() / "test_worker")
      .string();
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const fs::path& p, const std::string& text, int mode) {
  std::ofstream(p, std::ios::binary) << text;
  chmod(p.c_str(), mode);
}

// Alive and not a zombie (an orphan's zombie may linger when PID 1 does not
// reap).
bool IsAlive(int pid) {
  if (kill(pid, 0) != 0) return false;
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  return stat[paren + 2] != 'Z';
}

bool WaitUntil(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

std::map<std::string, int> ReadPids(const fs::path& dir) {
  std::map<std::string, int> pids;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".pid") continue;
    pids[e.path().stem().string()] = std::stoi(ReadFile(e.path()));
  }
  return pids;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "wg_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A pipe standing in for the console; a thread collects everything written to
// it.
class Console {
 public:
  Console() {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    read_fd_ = p[0];
    write_fd_ = p[1];
    reader_ = std::thread([this] {
      char buf[65536];
      while (true) {
        const ssize_t n = read(read_fd_, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text_.append(buf, static_cast<size_t>(n));
      }
    });
  }
  ~Console() { Finish(); }
  int fd() const { return write_fd_; }
  // Call after the group's Stop: closes our write end and returns all that was
  // written.
  const std::string& Finish() {
    if (write_fd_ >= 0) {
      close(write_fd_);
      write_fd_ = -1;
      reader_.join();
      close(read_fd_);
    }
    return text_;
  }
  std::vector<std::string> Lines() {
    std::vector<std::string> lines = absl::StrSplit(Finish(), '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
  }

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::thread reader_;
  std::string text_;
};

std::map<std::string, std::string> BaseEnv() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq != nullptr)
      env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  return env;
}

WorkerSpec Spec(int local_rank, int global_rank, std::vector<std::string> args,
                const std::string& error_file = "") {
  WorkerSpec s;
  s.local_rank = local_rank;
  s.global_rank = global_rank;
  s.argv = {TestWorker()};
  s.argv.insert(s.argv.end(), args.begin(), args.end());
  s.env = BaseEnv();
  s.env["RANK"] = std::to_string(global_rank);
  s.env["LOCAL_RANK"] = std::to_string(local_rank);
  if (!error_file.empty()) {
    s.env["TORCHELASTIC_ERROR_FILE"] = error_file;
    s.error_file = error_file;
  }
  return s;
}

// Console output sent to pipes so the test's own output stays readable.
struct Consoles {
  Console out;
  Console err;
  // torchrun's console output (the default): lines as written, teed lines
  // prefixed "[<role><local rank>]:".
  OutputOptions Torchrun() {
    OutputOptions o;
    o.console_stdout_fd = out.fd();
    o.console_stderr_fd = err.fd();
    return o;
  }
  // --prefix-output: every console line prefixed "[rank<global rank>]:", so
  // that a test can tell the ranks' lines apart.
  OutputOptions Options() {
    OutputOptions o = Torchrun();
    o.line_prefix_template = "[rank${rank}]:";
    o.prefix_all_lines = true;
    return o;
  }
};

const WorkerExit* FindExit(const GroupStatus& s, int global_rank) {
  for (const WorkerExit& e : s.exits) {
    if (e.global_rank == global_rank) return &e;
  }
  return nullptr;
}

// Waits until every worker's exit is recorded (Wait returns at the first
// failure).
GroupStatus WaitAllExited(WorkerGroup& g, size_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  GroupStatus s = g.Poll();
  while (s.exits.size() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    s = g.Poll();
  }
  return s;
}

TEST(WorkerGroupTest, AllSucceedWithTheirExactEnvironment) {
  setenv("MUSTER_RUN_ID", "agent-only",
         1);  // the agent's own variable must not leak
  Consoles c;
  std::vector<WorkerSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back(Spec(i, 4 + i, {"--print-env"}));
    specs.back().env.erase("MUSTER_RUN_ID");
  }
  auto g = WorkerGroup::Start(std::move(specs), c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<int> pids = (*g)->pids();
  EXPECT_EQ(std::set<int>(pids.begin(), pids.end()).size(), 4u);
  GroupStatus s = (*g)->Wait(absl::Seconds(30));
  EXPECT_EQ(s.state, GroupState::kSucceeded);
  ASSERT_EQ(s.exits.size(), 4u);
  for (const WorkerExit& e : s.exits) {
    EXPECT_TRUE(e.succeeded());
    EXPECT_EQ(e.exit_code, 0);
    EXPECT_EQ(e.signal, 0);
    EXPECT_EQ(e.global_rank, e.local_rank + 4);
    EXPECT_EQ(e.pid, pids[static_cast<size_t>(e.local_rank)]);
  }
  s = (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_EQ(s.state, GroupState::kSucceeded);
  unsetenv("MUSTER_RUN_ID");
  const std::string out = c.out.Finish();
  for (int r = 4; r < 8; ++r) {
    EXPECT_THAT(out,
                HasSubstr(absl::StrCat("[rank", r, "]:env RANK=", r, "\n")));
    EXPECT_THAT(out, HasSubstr(absl::StrCat("[rank", r,
                                            "]:env LOCAL_RANK=", r - 4, "\n")));
    EXPECT_THAT(out, HasSubstr(absl::StrCat("[rank", r,
                                            "]:env MUSTER_RUN_ID=<unset>\n")));
    EXPECT_THAT(out, HasSubstr(absl::StrCat("[rank", r, "]:test_worker rank ",
                                            r, " done\n")));
  }
}

TEST(WorkerGroupTest, ExitCodesAndSignalsAreRecorded) {
  Consoles c;
  std::vector<WorkerSpec> specs;
  specs.push_back(Spec(0, 0, {"--exit-code=3"}));
  specs.push_back(Spec(1, 1, {"--signal=USR1"}));
  specs.push_back(Spec(2, 2, {"--signal=9", "--exit-code=4"}));
  specs.push_back(Spec(3, 3, {}));
  auto g = WorkerGroup::Start(std::move(specs), c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  GroupStatus s = WaitAllExited(**g, 4, absl::Seconds(30));
  EXPECT_EQ(s.state, GroupState::kFailed);
  ASSERT_EQ(s.exits.size(), 4u);
  EXPECT_EQ(FindExit(s, 0)->exit_code, 3);
  EXPECT_EQ(FindExit(s, 0)->signal, 0);
  EXPECT_EQ(FindExit(s, 1)->exit_code, -1);
  EXPECT_EQ(FindExit(s, 1)->signal, SIGUSR1);
  EXPECT_EQ(FindExit(s, 2)->signal, SIGKILL);
  EXPECT_TRUE(FindExit(s, 3)->succeeded());
  // Failures first, by end time; the success last.
  EXPECT_EQ(s.exits.back().global_rank, 3);
  for (size_t i = 1; i + 1 < s.exits.size(); ++i) {
    EXPECT_LE(s.exits[i - 1].end_time, s.exits[i].end_time);
  }
  EXPECT_EQ((*g)->Stop(SIGTERM, absl::Seconds(1)).exits.size(), 4u);
}

TEST(WorkerGroupTest, FailureIsSeenWhileOthersRunAndStopEndsThem) {
  Consoles c;
  std::vector<WorkerSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back(i == 1 ? Spec(i, i, {"--exit-code=7"})
                           : Spec(i, i, {"--sleep=100"}));
  }
  auto g = WorkerGroup::Start(std::move(specs), c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  const absl::Time t0 = absl::Now();
  GroupStatus s = (*g)->Wait(absl::Seconds(30));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(s.state, GroupState::kFailed);
  ASSERT_EQ(s.exits.size(), 1u);
  EXPECT_EQ(s.exits[0].global_rank, 1);
  EXPECT_EQ(s.exits[0].exit_code, 7);
  const std::vector<int> pids = (*g)->pids();
  for (int i : {0, 2, 3})
    EXPECT_TRUE(IsAlive(pids[static_cast<size_t>(i)])) << i;

  const absl::Time t1 = absl::Now();
  s = (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_LT(absl::Now() - t1, absl::Seconds(4));
  EXPECT_EQ(s.state, GroupState::kFailed);
  ASSERT_EQ(s.exits.size(), 4u);
  EXPECT_EQ(s.exits[0].global_rank, 1);  // the root cause stays first
  for (int i : {0, 2, 3}) {
    EXPECT_EQ(FindExit(s, i)->signal, SIGTERM) << i;
    EXPECT_FALSE(IsAlive(pids[static_cast<size_t>(i)])) << i;
  }
}

TEST(WorkerGroupTest, PollDoesNotBlockAndWaitTimesOut) {
  Consoles c;
  auto g = WorkerGroup::Start({Spec(0, 0, {"--sleep=100"})}, c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  const absl::Time t0 = absl::Now();
  GroupStatus s = (*g)->Poll();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_EQ(s.state, GroupState::kRunning);
  EXPECT_TRUE(s.exits.empty());
  s = (*g)->Wait(absl::Milliseconds(300));
  const absl::Duration waited = absl::Now() - t0;
  EXPECT_GE(waited, absl::Milliseconds(290));
  EXPECT_LT(waited, absl::Seconds(3));
  EXPECT_EQ(s.state, GroupState::kRunning);
  (*g)->Stop(SIGTERM, absl::Seconds(5));
}

TEST(WorkerGroupTest, SigtermIgnoringWorkerIsKilledAfterGrace) {
  TempDir dir;
  Consoles c;
  auto g = WorkerGroup::Start({Spec(0, 0,
                                    {"--ignore-sigterm", "--sleep=100",
                                     "--pid-dir=" + dir.path().string()})},
                              c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  // The pid file is written after SIGTERM is ignored.
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(dir.path() / "0.pid"); },
                        absl::Seconds(10)));
  const absl::Time t0 = absl::Now();
  GroupStatus s = (*g)->Stop(SIGTERM, absl::Milliseconds(500));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_GE(took, absl::Milliseconds(490));
  EXPECT_LT(took, absl::Seconds(4));
  ASSERT_EQ(s.exits.size(), 1u);
  EXPECT_EQ(s.exits[0].signal, SIGKILL);
  EXPECT_EQ(s.state, GroupState::kFailed);
}

TEST(WorkerGroupTest, SignalIsForwardedToEveryWorker) {
  TempDir dir;
  Consoles c;
  const std::string pid_dir = "--pid-dir=" + dir.path().string();
  auto g = WorkerGroup::Start({Spec(0, 0, {"--sleep=100", pid_dir}),
                               Spec(1, 1, {"--sleep=100", pid_dir})},
                              c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(WaitUntil([&] { return ReadPids(dir.path()).size() == 2; },
                        absl::Seconds(10)));
  (*g)->Signal(SIGUSR2);
  GroupStatus s = WaitAllExited(**g, 2, absl::Seconds(10));
  ASSERT_EQ(s.exits.size(), 2u);
  for (const WorkerExit& e : s.exits) EXPECT_EQ(e.signal, SIGUSR2);
  (*g)->Stop(SIGTERM, absl::Seconds(1));
  (*g)->Signal(SIGUSR2);  // nothing left to signal: harmless
}

TEST(WorkerGroupTest, NoOrphansAfterStopIncludingGrandchildren) {
  TempDir dir;
  Consoles c;
  const std::string pid_dir = "--pid-dir=" + dir.path().string();
  std::vector<WorkerSpec> specs;
  specs.push_back(Spec(0, 0, {"--sleep=100", pid_dir}));
  specs.push_back(Spec(1, 1, {"--sleep=100", "--ignore-sigterm", pid_dir}));
  WorkerSpec shell = Spec(2, 2, {});
  shell.argv = {
      "sh", "-c",
      absl::StrCat("sleep 100 & echo $! > ", dir.path().string(),
                   "/gc.pid.tmp && mv ", dir.path().string(), "/gc.pid.tmp ",
                   dir.path().string(), "/gc.pid; echo $$ > ",
                   dir.path().string(), "/2.pid; wait")};
  specs.push_back(shell);
  auto g = WorkerGroup::Start(std::move(specs), c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(WaitUntil([&] { return ReadPids(dir.path()).size() == 4; },
                        absl::Seconds(10)));
  const std::map<std::string, int> pids = ReadPids(dir.path());
  for (const auto& [name, pid] : pids) EXPECT_TRUE(IsAlive(pid)) << name;
  GroupStatus s = (*g)->Stop(SIGTERM, absl::Seconds(1));
  EXPECT_EQ(s.exits.size(), 3u);
  for (const auto& [name, pid] : pids) {
    EXPECT_TRUE(
        WaitUntil([pid = pid] { return !IsAlive(pid); }, absl::Seconds(5)))
        << name << " pid " << pid << " survived Stop";
  }
}

TEST(WorkerGroupTest, StopDoesNotWaitForeverForPipesHeldByADaemon) {
  TempDir dir;
  Consoles c;
  WorkerSpec s = Spec(0, 0, {});
  // The daemon leaves the worker's process group (setsid) but keeps its stdout
  // and stderr.
  s.argv = {"sh", "-c",
            absl::StrCat("setsid sleep 30 & echo $! > ", dir.path().string(),
                         "/d.tmp && mv ", dir.path().string(), "/d.tmp ",
                         dir.path().string(), "/daemon.pid; echo hi")};
  auto g = WorkerGroup::Start({s}, c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(
      WaitUntil([&] { return ReadPids(dir.path()).count("daemon") > 0; },
                absl::Seconds(10)));
  const int daemon = ReadPids(dir.path())["daemon"];
  // setsid has exec'ed sleep once the process is called "sleep".
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ReadFile(absl::StrCat("/proc/", daemon, "/comm")) == "sleep\n";
      },
      absl::Seconds(10)));
  EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
  const absl::Time t0 = absl::Now();
  GroupStatus st = (*g)->Stop(SIGTERM, absl::Seconds(1));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_LT(took, absl::Seconds(6));
  EXPECT_EQ(st.state, GroupState::kSucceeded);
  EXPECT_TRUE(IsAlive(daemon));  // outside our groups: not ours to kill
  kill(daemon, SIGKILL);
  EXPECT_EQ(c.out.Finish(), "[rank0]:hi\n");
}

TEST(WorkerGroupTest, StopDoesNotHangOnAConsoleNobodyReads) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  OutputOptions o;
  o.console_stdout_fd = p[1];
  o.console_stderr_fd = p[1];
  auto g =
      WorkerGroup::Start({Spec(0, 0, {"--lines=5000", "--line-len=1000"})}, o);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::SleepFor(
      absl::Milliseconds(200));  // the console pipe fills; the reader blocks
  const absl::Time t0 = absl::Now();
  GroupStatus st = (*g)->Stop(SIGTERM, absl::Seconds(1));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(8));
  ASSERT_EQ(st.exits.size(), 1u);
  EXPECT_EQ(st.exits[0].signal, SIGTERM);
  // The console goes away: the reader, let go by Stop, gets EPIPE (not a
  // SIGPIPE for the whole process) and ends.
  close(p[0]);
  g->reset();
  absl::SleepFor(absl::Milliseconds(
      200));  // let the reader finish with p[1] before it closes
  close(p[1]);
}

TEST(WorkerGroupTest, DestructorStopsTheGroup) {
  Consoles c;
  std::vector<int> pids;
  {
    auto g = WorkerGroup::Start(
        {Spec(0, 0, {"--sleep=100"}), Spec(1, 1, {"--sleep=100"})},
        c.Options());
    ASSERT_TRUE(g.ok()) << g.status();
    pids = (*g)->pids();
  }
  // Reaped by the destructor: the pids are gone, not zombies.
  for (int pid : pids) EXPECT_NE(kill(pid, 0), 0) << pid;
}

TEST(WorkerGroupTest, StopIsIdempotent) {
  Consoles c;
  auto g = WorkerGroup::Start({Spec(0, 0, {"--sleep=100"})}, c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  GroupStatus first = (*g)->Stop(SIGINT, absl::Seconds(5));
  ASSERT_EQ(first.exits.size(), 1u);
  EXPECT_EQ(first.exits[0].signal, SIGINT);
  const absl::Time t0 = absl::Now();
  GroupStatus second = (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  ASSERT_EQ(second.exits.size(), 1u);
  EXPECT_EQ(second.exits[0].signal, SIGINT);
  EXPECT_EQ(second.state, first.state);
}

// Every console line of 4 workers printing in small pieces is whole and
// prefixed.
void CheckNoTornLines(int lines, int len) {
  Consoles c;
  std::vector<WorkerSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back(Spec(
        i, i,
        {absl::StrCat("--lines=", lines), absl::StrCat("--line-len=", len)}));
  }
  auto g = WorkerGroup::Start(std::move(specs), c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Wait(absl::Seconds(60)).state, GroupState::kSucceeded);
  (*g)->Stop(SIGTERM, absl::Seconds(5));
  const std::string x(static_cast<size_t>(len), 'x');
  std::map<int, int> count;
  int done = 0;
  const std::vector<std::string> all = c.out.Lines();
  int bad = 0;
  for (const std::string& line : all) {
    // ^\[rank\d\]:x{L}$ (or the worker's "done" line)
    const bool prefixed = line.size() > 8 && absl::StartsWith(line, "[rank") &&
                          line[5] >= '0' && line[5] <= '3' && line[6] == ']' &&
                          line[7] == ':';
    const std::string body = prefixed ? line.substr(8) : "";
    if (prefixed && body == x) {
      ++count[line[5] - '0'];
    } else if (prefixed && body == absl::StrCat("test_worker rank ",
                                                line[5] - '0', " done")) {
      ++done;
    } else if (++bad <= 3) {
      ADD_FAILURE() << "torn or unprefixed line (" << line.size()
                    << " chars): " << line.substr(0, 120);
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(done, 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(count[r], lines) << "rank " << r;
  EXPECT_EQ(c.err.Finish(), "");
}

TEST(WorkerGroupTest, ConsoleLinesArePrefixedAndNeverTorn) {
  CheckNoTornLines(2000, 100);
}

TEST(WorkerGroupTest, LinesLongerThanPipeBufAreNeverTorn) {
  CheckNoTornLines(200, 9000);
}

TEST(WorkerGroupTest, OverlongLinesAreFlushedInPieces) {
  TempDir dir;
  Consoles c;
  OutputOptions o = c.Options();
  o.attempt_dir = dir.path().string();
  o.tees = {{-1, kStdOut}};
  const int len = 200000;
  auto g = WorkerGroup::Start(
      {Spec(0, 0, {"--lines=2", absl::StrCat("--line-len=", len)})}, o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
  (*g)->Stop(SIGTERM, absl::Seconds(5));
  size_t xs = 0;
  for (const std::string& line : c.out.Lines()) {
    ASSERT_TRUE(absl::StartsWith(line, "[rank0]:")) << line.substr(0, 50);
    const std::string body = line.substr(8);
    if (absl::StartsWith(body, "test_worker")) continue;
    EXPECT_LE(body.size(), 64u * 1024);
    EXPECT_EQ(body.find_first_not_of('x'), std::string::npos);
    xs += body.size();
  }
  EXPECT_EQ(xs, 2u * len);
  // The file keeps the bytes exactly, the unterminated last line included.
  const std::string x(len, 'x');
  EXPECT_EQ(ReadFile(dir.path() / "0" / "stdout.log"),
            "test_worker rank 0 done\n" + x + "\n" + x);
}

TEST(WorkerGroupTest, PartialLastLineIsFlushedAtExit) {
  Consoles c;
  auto g = WorkerGroup::Start({Spec(0, 0, {"--lines=1", "--line-len=5"})},
                              c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  (*g)->Wait(absl::Seconds(30));
  (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_EQ(c.out.Finish(), "[rank0]:test_worker rank 0 done\n[rank0]:xxxxx\n");
}

TEST(WorkerGroupTest, RedirectSendsStreamsToFilesOnly) {
  TempDir dir;
  Consoles c;
  OutputOptions o = c.Options();
  o.attempt_dir =
      (dir.path() / "run" / "attempt_0").string();  // created with parents
  o.redirects = {{-1, kStdOut}};
  auto g = WorkerGroup::Start({Spec(0, 10, {"--print-env", "--stderr=oops"}),
                               Spec(1, 11, {"--print-env", "--stderr=oops"})},
                              o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
  (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_EQ(c.out.Finish(), "");
  const std::string err = c.err.Finish();
  EXPECT_THAT(err, HasSubstr("[rank10]:oops\n"));
  EXPECT_THAT(err, HasSubstr("[rank11]:oops\n"));
  for (int local : {0, 1}) {
    const fs::path d = fs::path(o.attempt_dir) / std::to_string(local);
    const std::string out = ReadFile(d / "stdout.log");
    // Files have no prefix.
    EXPECT_TRUE(
        absl::StartsWith(out, absl::StrCat("env RANK=", 10 + local, "\n")))
        << out;
    EXPECT_THAT(out, HasSubstr(absl::StrCat("test_worker rank ", 10 + local,
                                            " done\n")));
    EXPECT_FALSE(fs::exists(d / "stderr.log"));
  }
}

TEST(WorkerGroupTest, TeeWritesFilesAndConsoleFilteredByLocalRank) {
  TempDir dir;
  Consoles c;
  OutputOptions o = c.Options();
  o.attempt_dir = dir.path().string();
  o.tees = {{-1, kStdAll}};
  o.console_local_ranks = {1};
  auto g = WorkerGroup::Start(
      {Spec(0, 0, {"--stderr=e0"}), Spec(1, 1, {"--stderr=e1"}),
       Spec(2, 2, {"--stderr=e2"})},
      o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
  (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_EQ(c.out.Finish(), "[rank1]:test_worker rank 1 done\n");
  EXPECT_EQ(c.err.Finish(), "[rank1]:e1\n");
  for (int local : {0, 1, 2}) {
    const fs::path d = dir.path() / std::to_string(local);
    EXPECT_EQ(ReadFile(d / "stdout.log"),
              absl::StrCat("test_worker rank ", local, " done\n"));
    EXPECT_EQ(ReadFile(d / "stderr.log"), absl::StrCat("e", local, "\n"));
  }
}

TEST(WorkerGroupTest, PerRankRedirectTeeTorchrunPrefixes) {
  TempDir dir;
  Consoles c;
  OutputOptions o = c.Torchrun();
  o.attempt_dir = dir.path().string();
  o.redirects = {{0, kStdAll}};
  o.tees = {{0, kStdErr}};  // tee wins over redirect for rank 0's stderr
  auto g = WorkerGroup::Start(
      {Spec(0, 0, {"--stderr=e0"}), Spec(1, 1, {"--stderr=e1"})}, o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
  (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_EQ(c.out.Finish(), "test_worker rank 1 done\n");
  // Rank 0's stderr is teed (torchrun's tail header), rank 1's is the
  // worker's own.
  EXPECT_THAT(c.err.Lines(), UnorderedElementsAre("[default0]:e0", "e1"));
  EXPECT_EQ(ReadFile(dir.path() / "0" / "stdout.log"),
            "test_worker rank 0 done\n");
  EXPECT_EQ(ReadFile(dir.path() / "0" / "stderr.log"), "e0\n");
  EXPECT_FALSE(fs::exists(dir.path() / "1"));
}

// torchrun's console, byte for byte: without -r/-t the workers' lines as
// they wrote them; teed lines with the tail header "[<role><local rank>]:".
TEST(WorkerGroupTest, DefaultConsoleOutputIsTorchruns) {
  {
    Consoles c;
    auto g = WorkerGroup::Start(
        {Spec(0, 4, {"--stderr=e0"}), Spec(1, 5, {"--stderr=e1"})},
        c.Torchrun());
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
    (*g)->Stop(SIGTERM, absl::Seconds(5));
    EXPECT_THAT(c.out.Lines(), UnorderedElementsAre("test_worker rank 4 done",
                                                    "test_worker rank 5 done"));
    EXPECT_THAT(c.err.Lines(), UnorderedElementsAre("e0", "e1"));
  }
  {
    TempDir dir;
    Consoles c;
    OutputOptions o = c.Torchrun();
    o.attempt_dir = dir.path().string();
    o.tees = {{-1, kStdOut}};  // -t 1: stdout teed, stderr as written
    o.role = "trainer";
    auto g = WorkerGroup::Start(
        {Spec(0, 4, {"--stderr=e0"}), Spec(1, 5, {"--stderr=e1"})}, o);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
    (*g)->Stop(SIGTERM, absl::Seconds(5));
    EXPECT_THAT(c.out.Lines(),
                UnorderedElementsAre("[trainer0]:test_worker rank 4 done",
                                     "[trainer1]:test_worker rank 5 done"));
    EXPECT_THAT(c.err.Lines(), UnorderedElementsAre("e0", "e1"));
  }
}

// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE replaces the tee header, as in
// PyTorch's test_capture_logs_using_default_logs_specs.
TEST(WorkerGroupTest, LinePrefixTemplateReplacesTheTeeHeader) {
  TempDir dir;
  Consoles c;
  OutputOptions o = c.Torchrun();
  o.attempt_dir = dir.path().string();
  o.redirects = {{-1, kStdAll}};
  o.tees = {{-1, kStdAll}};
  o.line_prefix_template = "[rank${rank}]: ";
  auto g = WorkerGroup::Start(
      {Spec(0, 6, {"--stderr=e0"}), Spec(1, 7, {"--stderr=e1"})}, o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
  (*g)->Stop(SIGTERM, absl::Seconds(5));
  EXPECT_THAT(c.out.Lines(),
              UnorderedElementsAre("[rank6]: test_worker rank 6 done",
                                   "[rank7]: test_worker rank 7 done"));
  EXPECT_THAT(c.err.Lines(),
              UnorderedElementsAre("[rank6]: e0", "[rank7]: e1"));
  EXPECT_EQ(ReadFile(dir.path() / "1" / "stderr.log"), "e1\n");
}

TEST(ExpandLinePrefixTest, AsPythonsSafeSubstitute) {
  EXPECT_EQ(ExpandLinePrefix(kDefaultLinePrefix, "default", 9, 1, "h"),
            "[default1]:");
  EXPECT_EQ(ExpandLinePrefix("[$role_name ${rank}/$local_rank@${hostname}] ",
                             "trainer", 12, 3, "node7"),
            "[trainer 12/3@node7] ");
  // $$ is $; unknown names, a lone $, an unclosed brace stay as written.
  EXPECT_EQ(
      ExpandLinePrefix("$$rank $group_rank ${nope} $ ${rank", "r", 1, 0, ""),
      "$rank $group_rank ${nope} $ ${rank");
  // An identifier runs as far as it can: $ranks is not $rank.
  EXPECT_EQ(ExpandLinePrefix("$ranks ${rank}s", "r", 2, 0, ""), "$ranks 2s");
}

TEST(WorkerGroupTest, ErrorFileMessageIsReadIntoTheExit) {
  TempDir dir;
  Consoles c;
  const std::string f0 = (dir.path() / "error0.json").string();
  const std::string f1 = (dir.path() / "error1.json").string();
  // A stale file of an earlier attempt must not be reported for this one.
  WriteFile(f1, R"({"message": "stale"})", 0644);
  const std::string message = "boom \"quoted\" \\ back\nslash \xc3\xa9";
  auto g = WorkerGroup::Start(
      {Spec(0, 0, {"--exit-code=5", "--error-message=" + message}, f0),
       Spec(1, 1, {"--exit-code=6"}, f1)},
      c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  GroupStatus s = WaitAllExited(**g, 2, absl::Seconds(30));
  ASSERT_EQ(s.exits.size(), 2u);
  EXPECT_EQ(FindExit(s, 0)->exit_code, 5);
  EXPECT_EQ(FindExit(s, 0)->error_message, message);
  EXPECT_EQ(FindExit(s, 1)->exit_code, 6);
  EXPECT_EQ(FindExit(s, 1)->error_message, "");
  (*g)->Stop(SIGTERM, absl::Seconds(1));
}

TEST(ReadErrorFileTest, BothFormsAndGarbage) {
  TempDir dir;
  const fs::path p = dir.path() / "e.json";
  WriteFile(p, R"({"message": "plain"})", 0644);
  EXPECT_EQ(ReadErrorFile(p.string()), "plain");
  // What PyTorch's @record writes.
  WriteFile(p,
            R"({"message": {"message": "RuntimeError: nested",
  "extraInfo": {"py_callstack": "x", "timestamp": "1700000000"}}})",
            0644);
  EXPECT_EQ(ReadErrorFile(p.string()), "RuntimeError: nested");
  for (const char* garbage :
       {"", "not json", "{\"message\": ", "[1,2]", "{\"message\": 3}",
        "{\"other\": \"x\"}", "{\"message\": {\"extraInfo\": {}}}",
        "{\"message\": {\"message\": null}}", "\"str\""}) {
    WriteFile(p, garbage, 0644);
    EXPECT_EQ(ReadErrorFile(p.string()), "") << garbage;
  }
  EXPECT_EQ(ReadErrorFile((dir.path() / "missing.json").string()), "");
  EXPECT_EQ(ReadErrorFile(dir.path().string()), "");  // a directory
}

TEST(ReadErrorFileTest, TracebackOfRecord) {
  TempDir dir;
  const fs::path p = dir.path() / "e.json";
  WriteFile(p,
            R"({"message": {"message": "ValueError: bad",
  "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\"\nValueError: bad\n", "timestamp": "1"}}})",
            0644);
  ErrorFileContents c = ReadErrorFileContents(p.string());
  EXPECT_EQ(c.message, "ValueError: bad");
  EXPECT_EQ(c.traceback,
            "Traceback (most recent call last):\n  File \"t.py\"\nValueError: "
            "bad\n");
  // A huge traceback keeps its end, where the error is.
  const std::string big(40000, 'x');
  WriteFile(p,
            absl::StrCat(R"({"message": {"message": "m", "extraInfo": )",
                         R"({"py_callstack": ")", big, R"(END"}}})"),
            0644);
  c = ReadErrorFileContents(p.string());
  EXPECT_LT(c.traceback.size(), 17000u);
  EXPECT_TRUE(absl::EndsWith(c.traceback, "xEND"));
  EXPECT_EQ(ReadErrorFileContents(p.string() + ".missing").traceback, "");
}

// --numa-binding's CPU set is applied in the worker before exec.
TEST(WorkerGroupTest, CpuAffinityIsSetBeforeExec) {
  Consoles c;
  WorkerSpec s = Spec(0, 0, {});
  s.argv = {"sh", "-c", "grep Cpus_allowed_list /proc/self/status"};
  s.cpu_affinity = {0};
  auto g = WorkerGroup::Start({s}, c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  GroupStatus st = WaitAllExited(**g, 1, absl::Seconds(30));
  (*g)->Stop(SIGTERM, absl::Seconds(1));
  ASSERT_EQ(st.exits.size(), 1u);
  EXPECT_TRUE(st.exits[0].succeeded());
  EXPECT_THAT(c.out.Finish(), HasSubstr("Cpus_allowed_list:\t0\n"));
}

// torchrun's --duplicate-*-filters: matching lines of teed streams are copied
// to one filtered file per stream; a failed worker's last stderr line is kept.
TEST(WorkerGroupTest, FilteredFilesAndLastStderrLine) {
  TempDir dir;
  Consoles c;
  OutputOptions o = c.Options();
  o.attempt_dir = dir.path().string();
  o.tees = {{0, kStdAll}, {2, kStdAll}};  // rank 1 is not teed: not copied
  o.console_local_ranks = {0, 1};         // rank 2 is teed but filtered out
  o.duplicate_stdout_filters = {"loss"};
  o.duplicate_stderr_filters = {"WARN"};
  std::vector<WorkerSpec> specs;
  for (int r = 0; r < 3; ++r) {
    WorkerSpec s = Spec(r, 10 + r, {});
    s.argv = {"sh", "-c",
              "echo loss=1; echo step; echo WARN x >&2; echo 'Boom: "
              "last' >&2; echo >&2; exit 3"};
    specs.push_back(s);
  }
  auto g = WorkerGroup::Start(std::move(specs), o);
  ASSERT_TRUE(g.ok()) << g.status();
  WaitAllExited(**g, 3, absl::Seconds(30));
  GroupStatus st = (*g)->Stop(SIGTERM, absl::Seconds(1));
  ASSERT_EQ(st.exits.size(), 3u);
  EXPECT_EQ(FindExit(st, 10)->last_stderr_line, "Boom: last");
  EXPECT_EQ(FindExit(st, 11)->last_stderr_line, "Boom: last");
  std::ifstream out(dir.path() / "filtered_stdout.log");
  std::string text((std::istreambuf_iterator<char>(out)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "[rank10]:loss=1\n");
  std::ifstream err(dir.path() / "filtered_stderr.log");
  std::string errs((std::istreambuf_iterator<char>(err)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(errs, "[rank10]:WARN x\n");
}

TEST(WorkerGroupTest, ProgramNotFoundNamesTheProgram) {
  Consoles c;
  WorkerSpec s = Spec(0, 0, {});
  s.argv = {"muster-no-such-program-xyz", "--flag"};
  auto g = WorkerGroup::Start({s}, c.Options());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("'muster-no-such-program-xyz'"));
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("not found in PATH"));

  s.argv = {"/nonexistent/dir/train.exe"};
  g = WorkerGroup::Start({s}, c.Options());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("'/nonexistent/dir/train.exe'"));
}

TEST(WorkerGroupTest, ProgramIsLookedUpInTheWorkersPath) {
  TempDir dir;
  Consoles c;
  WriteFile(dir.path() / "my-trainer", "#!/bin/sh\necho trained \"$1\"\n",
            0755);
  WorkerSpec s = Spec(0, 0, {});
  s.argv = {"my-trainer", "well"};
  s.env["PATH"] = dir.path().string() + ":/usr/bin:/bin";
  auto g = WorkerGroup::Start({s}, c.Options());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Wait(absl::Seconds(30)).state, GroupState::kSucceeded);
  (*g)->Stop(SIGTERM, absl::Seconds(1));
  EXPECT_EQ(c.out.Finish(), "[rank0]:trained well\n");
}

TEST(WorkerGroupTest, NotExecutableOrDirectoryNamesTheFix) {
  TempDir dir;
  Consoles c;
  const fs::path script = dir.path() / "train.sh";
  WriteFile(script, "#!/bin/sh\nexit 0\n", 0644);
  WorkerSpec s = Spec(0, 0, {});
  s.argv = {script.string()};
  auto g = WorkerGroup::Start({s}, c.Options());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr(script.string()));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("not executable"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("chmod +x"));

  // Found through PATH but not executable: "not executable", not "not found".
  s.argv = {"train.sh"};
  s.env["PATH"] = dir.path().string();
  g = WorkerGroup::Start({s}, c.Options());
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("chmod +x"));

  s.argv = {dir.path().string()};
  g = WorkerGroup::Start({s}, c.Options());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("directory"));
}

TEST(WorkerGroupTest, ExecFailureFailsStartAndLeavesNoWorker) {
  TempDir dir;
  Consoles c;
  const fs::path bad = dir.path() / "bad-interp";
  WriteFile(bad, "#!/nonexistent/interpreter\n", 0755);
  WorkerSpec s1 = Spec(1, 1, {});
  s1.argv = {bad.string()};
  auto g = WorkerGroup::Start(
      {Spec(0, 0, {"--sleep=100", "--pid-dir=" + dir.path().string()}), s1},
      c.Options());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr(bad.string()));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("#!"));
  // The worker started first was killed and reaped: this process has no child
  // left.
  int st;
  EXPECT_EQ(waitpid(-1, &st, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(WorkerGroupTest, InvalidArguments) {
  Consoles c;
  EXPECT_EQ(WorkerGroup::Start({}, c.Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  WorkerSpec s = Spec(0, 0, {});
  s.argv.clear();
  EXPECT_EQ(WorkerGroup::Start({s}, c.Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  OutputOptions o = c.Options();
  o.redirects = {{-1, kStdErr}};
  auto g = WorkerGroup::Start({Spec(0, 0, {})}, o);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("attempt_dir"));
}

TEST(WorkerGroupTest, WorkersDieWithTheAgent) {
  TempDir dir;
  const std::string pid_dir = "--pid-dir=" + dir.path().string();
  std::vector<WorkerSpec> specs = {
      Spec(0, 0, {"--sleep=100", pid_dir}),
      Spec(1, 1, {"--sleep=100", "--ignore-sigterm", pid_dir})};
  const pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    // The "agent": starts the group and waits to be killed. No gtest in here.
    const int devnull = open("/dev/null", O_WRONLY);
    OutputOptions o;
    o.console_stdout_fd = devnull;
    o.console_stderr_fd = devnull;
    auto g = WorkerGroup::Start(specs, o);
    if (!g.ok()) _exit(3);
    sleep(100);
    _exit(4);
  }
  const bool started = WaitUntil(
      [&] { return ReadPids(dir.path()).size() == 2; }, absl::Seconds(10));
  kill(helper, SIGKILL);
  int st = 0;
  ASSERT_EQ(waitpid(helper, &st, 0), helper);
  ASSERT_TRUE(started) << "helper exit status " << st;
  ASSERT_TRUE(WIFSIGNALED(st));
  for (const auto& [name, pid] : ReadPids(dir.path())) {
    EXPECT_TRUE(
        WaitUntil([pid = pid] { return !IsAlive(pid); }, absl::Seconds(5)))
        << "worker " << name << " (pid " << pid << ") outlived its agent";
  }
}

}  // namespace
}  // namespace muster::agent
