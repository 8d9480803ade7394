// RunCommand on POSIX: posix_spawnp with stdin/stderr on /dev/null, stdout on
// a pipe, and a clean signal mask (the launcher blocks its stop signals before
// any thread starts; a helper must not inherit that).
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/platform/process.h"

namespace muster::platform {

absl::StatusOr<CommandResult> RunCommand(const CommandSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError("no command to run (empty argv)");
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) {
    env_strings.push_back(absl::StrCat(k, "=", v));
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  // posix_spawnp searches the launcher's own PATH.
  const int err =
      posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", spec.argv[0], ": ", std::strerror(err)));
  }
  CommandResult result;
  const absl::Time deadline = absl::Now() + spec.timeout;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      result.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t r = read(fds[0], buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (result.output.size() < spec.max_output) {
      result.output.append(buf, static_cast<size_t>(r));
    }
  }
  close(fds[0]);
  if (result.timed_out) kill(pid, SIGKILL);
  int status = 0;
  // After EOF the command is exiting; give it the rest of the time.
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    if (absl::Now() >= deadline && !result.timed_out) {
      result.timed_out = true;
      kill(pid, SIGKILL);
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (!result.timed_out) {
    if (WIFEXITED(status)) {
      result.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      result.signal = WTERMSIG(status);
    }
  }
  return result;
}

}  // namespace muster::platform
