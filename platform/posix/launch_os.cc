// Linux answers to muster/platform/launch_os.h.
#include "muster/platform/launch_os.h"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

namespace muster::platform::os {

int UsableCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  // The CPUs this process may use, not all of the machine's: a worker per CPU
  // that it may not run on only oversubscribes the ones it may.
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0
                 ? CPU_COUNT(&set)
                 : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, cpus);
}

PathKind StatPath(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return PathKind::kMissing;
  if (!S_ISREG(st.st_mode)) return PathKind::kOther;
  return access(path.c_str(), X_OK) == 0 ? PathKind::kExecutableFile
                                         : PathKind::kPlainFile;
}

bool HasDirectory(const std::string& program) {
  return program.find('/') != std::string::npos;
}

std::optional<int> SignalNumber(absl::string_view name) {
  static const std::pair<const char*, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT},
      {"TERM", SIGTERM}, {"USR1", SIGUSR1},   {"USR2", SIGUSR2},
      {"ALRM", SIGALRM}, {"PIPE", SIGPIPE},   {"CONT", SIGCONT},
      {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},
      {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},   {"VTALRM", SIGVTALRM},
      {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR},
      {"KILL", SIGKILL}, {"STOP", SIGSTOP}};
  for (const auto& [n, v] : kNames) {
    if (name == n) return v;
  }
  return std::nullopt;
}

std::string LauncherPath() {
  std::error_code ec;
  std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

void SetProcessEnv(const std::string& name, const std::string& value) {
  setenv(name.c_str(), value.c_str(), 1);
}

bool IsSignalNumber(int sig) { return sig > 0 && sig < NSIG; }

bool IsUncatchableSignal(int sig) { return sig == SIGKILL || sig == SIGSTOP; }

}  // namespace muster::platform::os
