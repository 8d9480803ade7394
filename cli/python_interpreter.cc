#include "cli/python_interpreter.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/agent/worker_group.h"

namespace muster::cli {
namespace {

// A program that prints the interpreter's own path and nothing else, whatever
// the user's site customisation prints to stderr.
constexpr char kPrintExecutable[] =
    "import sys; sys.stdout.write(sys.executable or '')";

}  // namespace

absl::StatusOr<std::string> ResolvePython(
    const std::string& python, const std::map<std::string, std::string>& env,
    absl::Duration timeout) {
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string arg0 = python, flag = "-c", code = kPrintExecutable;
  char* argv[] = {arg0.data(), flag.data(), code.data(), nullptr};

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
  // The launcher blocks its stop signals before any thread starts; the probe
  // must not inherit that mask.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  // posix_spawnp searches the launcher's PATH, which is the workers' too.
  const int err =
      posix_spawnp(&pid, python.c_str(), &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", python, ": ", std::strerror(err)));
  }
  std::string out;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
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
    if (out.size() < 64 * 1024) out.append(buf, static_cast<size_t>(r));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  // After EOF the interpreter is exiting; give it the rest of the time.
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    if (absl::Now() >= deadline && !timed_out) {
      timed_out = true;
      kill(pid, SIGKILL);
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (timed_out) {
    return absl::FailedPreconditionError(absl::StrCat(
        python, " did not answer within ", absl::FormatDuration(timeout)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        python, " failed to start (",
        WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        ")"));
  }
  std::string path(absl::StripAsciiWhitespace(out));
  if (path.empty() || path[0] != '/') {
    return absl::FailedPreconditionError(absl::StrCat(
        python, " did not name its executable (sys.executable is empty)"));
  }
  return path;
}

std::string ResolvePythonInterpreter(
    agent::AgentConfig* config, const std::map<std::string, std::string>& env) {
  if (config->python_interpreter.empty() || config->program.empty()) return "";
  const std::string given = config->python_interpreter;
  auto path_it = env.find("PATH");
  absl::StatusOr<std::string> found = agent::ResolveProgram(
      given, path_it != env.end() ? path_it->second : std::string());
  const std::string located = found.ok() ? *found : given;
  absl::StatusOr<std::string> real =
      ResolvePython(given, env, absl::Seconds(20));
  const std::string how =
      absl::StrCat("choose another with --python=PATH or PYTHON_EXEC=PATH");
  if (!real.ok()) {
    return absl::StrCat(
        "workers run Python ", located, " (", config->python_source,
        "), which could not be asked for its path: ", real.status().message(),
        "; ", how);
  }
  config->python_interpreter = *real;
  config->program[0] = *real;
  std::string via;
  if (*real != located) via = absl::StrCat(", via ", located);
  return absl::StrCat("workers run Python ", *real, " (", config->python_source,
                      via, "); ", how);
}

}  // namespace muster::cli
