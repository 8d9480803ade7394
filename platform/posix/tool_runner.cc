// SystemToolRunner() on Linux: posix_spawn with a pipe, a deadline, and a
// kill of the whole process group when it passes.
#include "muster/platform/tool_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace muster::platform {
namespace {

std::string FindExecutable(const std::string& name,
                           const std::map<std::string, std::string>& env) {
  auto path = env.find("PATH");
  std::vector<std::string> dirs;
  if (path != env.end()) {
    dirs = absl::StrSplit(path->second, ':', absl::SkipEmpty());
  }
  for (const char* d : {"/usr/local/sbin", "/usr/sbin", "/sbin",
                        "/usr/local/bin", "/usr/bin", "/bin"}) {
    dirs.emplace_back(d);
  }
  for (const std::string& d : dirs) {
    std::string p = absl::StrCat(d, "/", name);
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Reads the pipe until it closes or `deadline` passes.
void ReadUntil(int fd, absl::Time deadline, ToolResult* res) {
  char buf[4096];
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      res->timed_out = true;
      return;
    }
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1,
                 static_cast<int>(
                     std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    if (res->output.size() < (4u << 20)) res->output.append(buf, got);
  }
}

// Reaps `pid`; it exits promptly once its pipe closed or it was killed, so
// the wait is bounded.
int Reap(pid_t pid) {
  int status = 0;
  const absl::Time reap_deadline = absl::Now() + absl::Seconds(2);
  while (true) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (absl::Now() > reap_deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

class PosixToolRunner final : public ToolRunner {
 public:
  ToolResult Run(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env,
                 absl::Duration timeout) override {
    ToolResult res;
    if (argv.empty()) return res;
    res.path = FindExecutable(argv[0], env);
    if (res.path.empty()) return res;
    res.found = true;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return res;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<std::string> args = argv;
    args[0] = res.path;
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> envs;
    for (const auto& [k, v] : env) {
      if (k == "LC_ALL" || k == "LANG") continue;
      envs.push_back(absl::StrCat(k, "=", v));
    }
    envs.push_back("LC_ALL=C");
    std::vector<char*> cenv;
    for (auto& e : envs) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, res.path.c_str(), &fa, &attr, cargv.data(),
                         cenv.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(fds[1]);
    if (rc != 0) {
      close(fds[0]);
      res.output = std::strerror(rc);
      return res;
    }
    ReadUntil(fds[0], absl::Now() + timeout, &res);
    close(fds[0]);
    if (res.timed_out) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    res.exit_code = Reap(pid);
    return res;
  }
};

}  // namespace

ToolRunner& SystemToolRunner() {
  static PosixToolRunner* runner = new PosixToolRunner();
  return *runner;
}

}  // namespace muster::platform
