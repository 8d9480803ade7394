// POSIX environment: variables, PATH lookup as execvp does it, process facts.
#include "muster/platform/env.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "platform/posix/spawn.h"

extern char** environ;

namespace muster::platform {
namespace {

// What execvp uses when PATH is unset.
constexpr char kDefaultPath[] = "/bin:/usr/bin";

std::string ErrnoText(int err) { return std::strerror(err); }

bool IsExecutableFile(const std::string& path, int* err, bool* is_dir) {
  struct stat st;
  *is_dir = false;
  if (stat(path.c_str(), &st) != 0) {
    *err = errno;
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    *is_dir = true;
    *err = EACCES;
    return false;
  }
  if (access(path.c_str(), X_OK) != 0) {
    *err = errno;
    return false;
  }
  return true;
}

// Reads `name` from the environment a worker will get, falling back to ours.
}  // namespace

std::optional<std::string> GetEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    // Entries without '=' are not variables; the first of duplicate names is
    // what getenv sees.
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

absl::StatusOr<std::string> FindExecutable(const std::string& argv0,
                                           const std::string& path_env) {
  if (argv0.empty())
    return absl::InvalidArgumentError("the program name is empty");
  int err = 0;
  bool is_dir = false;
  if (argv0.find('/') != std::string::npos) {
    if (IsExecutableFile(argv0, &err, &is_dir)) return argv0;
    if (is_dir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "'", argv0,
          "' is a directory, not a program; give the program's path"));
    }
    if (err == ENOENT || err == ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat(
          "program '", argv0,
          "' not found: no such file; check the path and the spelling"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("'", argv0, "' is not executable: ", ErrnoText(err), "; ",
                     posix::NotExecutableHint(argv0)));
  }
  const std::string path =
      path_env.empty() ? std::string(kDefaultPath) : path_env;
  // As execvp: the first executable match wins; a match that cannot run is
  // remembered for the error, so "permission denied" is not reported as "not
  // found".
  std::string unusable;
  bool unusable_is_dir = false;
  int unusable_err = 0;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string candidate =
        dir.empty() ? argv0
                    : absl::StrCat(dir, dir.back() == '/' ? "" : "/", argv0);
    if (IsExecutableFile(candidate, &err, &is_dir)) return candidate;
    if (err != ENOENT && err != ENOTDIR && unusable.empty()) {
      unusable = candidate;
      unusable_is_dir = is_dir;
      unusable_err = err;
    }
  }
  if (!unusable.empty()) {
    if (unusable_is_dir) {
      return absl::FailedPreconditionError(
          absl::StrCat("program '", argv0, "' not found in PATH (", path,
                       "): only a directory '", unusable,
                       "'; give a path, or check the spelling"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "'", argv0, "' is not executable: '", unusable, "': ",
        ErrnoText(unusable_err), "; ", posix::NotExecutableHint(unusable)));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("program '", argv0, "' not found in PATH (", path,
                   path_env.empty() ? ", the default: PATH is empty" : "",
                   "); give a path, or check the spelling"));
}

int ProcessId() { return static_cast<int>(getpid()); }

std::vector<int> CurrentCpuAffinity() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

void WriteToStderr(absl::string_view text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void IgnoreBrokenPipes() { signal(SIGPIPE, SIG_IGN); }

}  // namespace muster::platform
