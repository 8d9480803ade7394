// JobKeeper (see muster/platform/job_keeper.h): a forked process that outlives
// the launcher by exactly as long as it takes to kill what the launcher's job
// left behind.
#include "muster/platform/job_keeper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "muster/platform/host.h"

namespace muster::platform {
namespace {

std::atomic<int> g_write_fd{-1};
// Written once by StartJobKeeper before any thread exists; read-only after.
std::string* g_tag = new std::string();

// Writes one line (at most PIPE_BUF bytes: one atomic write, never interleaved
// with another thread's). A keeper that is gone (EPIPE; SIGPIPE is ignored by
// the launcher) changes nothing for the job.
bool SendLine(const char* line, size_t n) {
  const int fd = g_write_fd.load();
  if (fd < 0 || n > PIPE_BUF) return false;
  ssize_t w;
  do {
    w = write(fd, line, n);
  } while (w < 0 && errno == EINTR);
  return w == static_cast<ssize_t>(n);
}

void Send(char op, pid_t pgid) {
  if (pgid <= 0) return;
  char line[32];
  const int n = std::snprintf(line, sizeof(line), "%c%d\n", op, pgid);
  SendLine(line, static_cast<size_t>(n));
}

// Whether /proc/<pid>/environ holds exactly "<var>=<tag>".
bool HasTag(const std::string& pid, const std::string& entry) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  if (!in) return false;
  const std::string env((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  size_t pos = 0;
  while ((pos = env.find(entry, pos)) != std::string::npos) {
    const bool starts = pos == 0 || env[pos - 1] == '\0';
    const size_t end = pos + entry.size();
    const bool ends = end == env.size() || env[end] == '\0';
    if (starts && ends) return true;
    pos = end;
  }
  return false;
}

// Pids of live processes carrying the tag (a zombie's environ reads empty).
std::set<pid_t> TaggedProcesses(const std::string& tag) {
  std::set<pid_t> out;
  const std::string entry = absl::StrCat(kJobTagVariable, "=", tag);
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid <= 1 || pid == self) continue;
    if (HasTag(e->d_name, entry)) out.insert(pid);
  }
  closedir(d);
  return out;
}

}  // namespace

int RunJobKeeper(int read_fd, const std::string& tag) {
  std::set<pid_t> groups;
  std::vector<std::string> trees;
  std::string pending;
  char buf[512];
  while (true) {
    const ssize_t n = read(read_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the launcher is gone (or closed on purpose)
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.size() > 1 && line[0] == 'R') {
        trees.push_back(line.substr(1));
        continue;
      }
      int pgid = 0;
      if (line.size() < 2 || !absl::SimpleAtoi(line.substr(1), &pgid) ||
          pgid <= 1) {
        continue;
      }
      if (line[0] == '+') groups.insert(pgid);
      if (line[0] == '-') groups.erase(pgid);
    }
  }
  std::set<pid_t> signalled;
  for (pid_t pgid : groups) {
    if (kill(-pgid, SIGKILL) == 0) signalled.insert(-pgid);
  }
  if (!tag.empty()) {
    // A process may fork while the scan runs: scan until one finds nothing,
    // bounded (a process stuck in uninterruptible sleep stays visible).
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (absl::Now() < deadline) {
      std::set<pid_t> found = TaggedProcesses(tag);
      if (found.empty()) break;
      for (pid_t pid : found) {
        if (kill(pid, SIGKILL) == 0) signalled.insert(pid);
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  // After the kills: nothing of the job writes there any more.
  for (const std::string& tree : trees) {
    std::error_code ec;
    std::filesystem::remove_all(tree, ec);
  }
  return static_cast<int>(signalled.size());
}

absl::Status StartJobKeeper() {
  if (g_write_fd.load() >= 0) return absl::OkStatus();
  uint32_t random[2] = {0, 0};
  // A tag no other job's processes carry; the pid alone tells launchers
  // apart should the OS's generator fail.
  (void)RandomBytes(reinterpret_cast<uint8_t*>(random), sizeof(random));
  *g_tag = absl::StrFormat("%d-%08x%08x", getpid(), random[0], random[1]);
  int fds[2];
  // Close-on-exec: a worker holding the write end would keep the keeper from
  // ever seeing EOF.
  if (pipe2(fds, O_CLOEXEC) != 0) {
    g_tag->clear();
    return absl::InternalError(
        absl::StrCat("job keeper: pipe: ", std::strerror(errno)));
  }
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    g_tag->clear();
    return absl::InternalError(
        absl::StrCat("job keeper: fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // The keeper. Its own process group: a Ctrl-C on the terminal or a kill
    // of the launcher's group must not take it down with the launcher.
    setpgid(0, 0);
    prctl(PR_SET_NAME, "muster-keeper");
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2,
                    SIGTSTP, SIGTTIN, SIGTTOU}) {
      signal(sig, SIG_IGN);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    close(fds[1]);
    // Hold nothing of the launcher's: no console pipe kept open, no log
    // file, no mount point (only stderr, for the one line below).
    const int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(null_fd, 1);
    }
    // close_range needs Linux 5.9; the loop covers older kernels' usual fds.
    if (fds[0] > 3) syscall(SYS_close_range, 3U, unsigned(fds[0] - 1), 0U);
    syscall(SYS_close_range, unsigned(fds[0] + 1), ~0U, 0U);
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != fds[0]) close(fd);
    }
    if (chdir("/") != 0) {
      // Harmless: only a busy mount point would notice.
    }
    const int killed = RunJobKeeper(fds[0], *g_tag);
    if (killed > 0) {
      std::fprintf(stderr,
                   "muster-keeper: the launcher (pid %d) exited; sent SIGKILL "
                   "to what its job left behind (%d process groups and "
                   "processes)\n",
                   launcher, killed);
    }
    _exit(0);
  }
  close(fds[0]);
  g_write_fd.store(fds[1]);
  return absl::OkStatus();
}

const std::string& JobKeeperTag() { return *g_tag; }

void KeeperWatchGroup(int pgid) { Send('+', pgid); }
void KeeperForgetGroup(int pgid) { Send('-', pgid); }

bool KeeperRemoveTreeAtExit(const std::string& path) {
  if (path.empty() || path.find('\n') != std::string::npos) return false;
  const std::string line = absl::StrCat("R", path, "\n");
  return SendLine(line.data(), line.size());
}

}  // namespace muster::platform
