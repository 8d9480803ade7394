// The launcher's questions to the operating system, in one place (cli's
// launch_* files call these as os::...). posix/launch_os.cc answers them on
// Linux, windows/launch_os_windows.cc on Windows.
//
// All functions are thread-safe, never fail (an unreadable answer is "none")
// and block only on a few file-system look-ups.
#ifndef MUSTER_PLATFORM_LAUNCH_OS_H_
#define MUSTER_PLATFORM_LAUNCH_OS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace muster::platform::os {

// CPUs this process may run on (sched_getaffinity: taskset, cgroup cpusets),
// else the online CPUs; at least 1.
int UsableCpuCount();

enum class PathKind {
  kMissing,         // nothing there (or not reachable)
  kExecutableFile,  // a regular file this process may execute
  kPlainFile,       // a regular file it may not execute
  kOther,           // a directory, device, socket...
};
// What `path` is, following symbolic links.
PathKind StatPath(const std::string& path);

// Whether `program` names a file by its path rather than a name to look up
// in PATH: it has a '/' (on Windows also a '\\' or a drive's ':').
bool HasDirectory(const std::string& program);

#ifdef _WIN32
// The search path when the environment has no PATH (PATH resolution itself is
// platform::FindExecutable, muster/platform/env.h); on Windows the system
// directories, which FindExecutable always searches.
inline constexpr char kDefaultSearchPath[] = "";
// The Python interpreter PROGRAM.py runs with unless --python or PYTHON_EXEC
// say otherwise: python.exe (Windows' installers put no python3.exe in PATH).
inline constexpr char kDefaultPython[] = "python";
// Between the entries of PATH-like variables (PYTHONPATH).
inline constexpr char kPathListSeparator = ';';
#else
inline constexpr char kDefaultSearchPath[] = "/usr/local/bin:/usr/bin:/bin";
inline constexpr char kDefaultPython[] = "python3";
inline constexpr char kPathListSeparator = ':';
#endif

// The absolute path of the running launcher (Linux: /proc/self/exe; Windows:
// GetModuleFileNameW); "" when the OS cannot say.
std::string LauncherPath();

// Sets variable `name` of this process's environment, which the workers
// inherit (the agent copies it at every round). Call it before any thread
// starts.
void SetProcessEnv(const std::string& name, const std::string& value);

// The number of the signal called `name` without its SIG prefix, in upper case
// ("TERM", "USR1"); nullopt for a name this table does not know.
std::optional<int> SignalNumber(absl::string_view name);
// Whether `sig` is a signal number of this system (0 < sig < NSIG).
bool IsSignalNumber(int sig);
// SIGKILL and SIGSTOP: no process can catch them, so none can forward them.
bool IsUncatchableSignal(int sig);

}  // namespace muster::platform::os

#endif  // MUSTER_PLATFORM_LAUNCH_OS_H_
