// The job keeper's clean-up, driven directly: a registered process group and a
// process that left its group but carries the job's tag are SIGKILLed when the
// pipe reaches EOF; a process of another job (another tag) is left alone.
// The end-to-end kill -9 of a real launcher is in tests/e2e/parity_e2e_test.cc.
// A tree handed over with an R line (a successful launch's temporary log
// directory) is removed at EOF, not before.
#include "muster/platform/job_keeper.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace muster::platform {
namespace {

// Starts `sleep 60` with MUSTER_JOB_TAG=tag, in a new process group when
// `own_group` (else in a session of its own: out of every group we know).
pid_t StartSleeper(const std::string& tag, bool own_group) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (own_group) {
      setpgid(0, 0);
    } else {
      setsid();
    }
    setenv(kJobTagVariable, tag.c_str(), 1);
    execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
    _exit(127);
  }
  if (own_group) setpgid(pid, pid);
  return pid;
}

// Whether `pid` runs /bin/sleep (has exec'd) within `timeout`.
bool Execed(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
    std::string argv0;
    if (std::getline(in, argv0, '\0') && argv0 == "sleep") return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

// Reaps pid, waiting up to `timeout`; returns whether it ended by SIGKILL.
bool KilledWithin(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(JobKeeperTest, KillsRegisteredGroupsAndTaggedProcessesAtEof) {
  const std::string tag = absl::StrCat("test-", getpid());
  const pid_t grouped = StartSleeper("untagged-but-registered", true);
  const pid_t escaped = StartSleeper(tag, false);
  const pid_t other_job = StartSleeper(tag + "-other", false);
  const pid_t forgotten = StartSleeper("untagged", true);
  // Wait until each child has exec'd (the keeper reads the exec'd environ).
  for (pid_t pid : {grouped, escaped, other_job, forgotten}) {
    ASSERT_TRUE(Execed(pid, absl::Seconds(10))) << "pid " << pid;
  }

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string lines =
      absl::StrCat("+", grouped, "\n+", forgotten, "\n-", forgotten, "\n");
  ASSERT_EQ(write(fds[1], lines.data(), lines.size()),
            static_cast<ssize_t>(lines.size()));
  close(fds[1]);  // what a dying launcher does
  const int killed = RunJobKeeper(fds[0], tag);
  close(fds[0]);

  EXPECT_TRUE(KilledWithin(grouped, absl::Seconds(5)));
  EXPECT_TRUE(KilledWithin(escaped, absl::Seconds(5)));
  EXPECT_EQ(killed, 2);
  // Another job's process and a forgotten group are not this keeper's.
  EXPECT_FALSE(KilledWithin(other_job, absl::Milliseconds(300)));
  EXPECT_FALSE(KilledWithin(forgotten, absl::Milliseconds(100)));
  kill(other_job, SIGKILL);
  kill(forgotten, SIGKILL);
  EXPECT_TRUE(KilledWithin(other_job, absl::Seconds(5)));
  EXPECT_TRUE(KilledWithin(forgotten, absl::Seconds(5)));
}

TEST(JobKeeperTest, RemovesHandedOverTreesAtEof) {
  char tmpl[] = "/tmp/muster-keeper-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::filesystem::create_directories(dir + "/attempt_0/0");
  std::ofstream(dir + "/attempt_0/0/stdout.log") << "x";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string line = absl::StrCat("R", dir, "\n");
  ASSERT_EQ(write(fds[1], line.data(), line.size()),
            static_cast<ssize_t>(line.size()));
  close(fds[1]);
  EXPECT_EQ(RunJobKeeper(fds[0], ""), 0);
  close(fds[0]);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace muster::platform
