// The process environment and facts about this process: environment
// variables, PATH lookup as the OS's exec does it, the process id, CPU
// affinity, and the one unbuffered write to stderr the logger needs.
#ifndef MUSTER_PLATFORM_ENV_H_
#define MUSTER_PLATFORM_ENV_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// <windows.h> (shellapi.h) defines FindExecutable as a macro for
// FindExecutableA/W, which would rename the function below in files that
// include it first.
#ifdef FindExecutable
#undef FindExecutable
#endif

namespace muster::platform {

// The value of environment variable `name`; nullopt when unset. Thread-safe
// while nobody sets variables.
std::optional<std::string> GetEnv(const std::string& name);

// The value of `name` as the C runtime holds it, or nullptr when unset or
// empty: for a caller that keeps a char pointer (valid until the variable is
// set again). Prefer GetEnv.
const char* NonEmptyEnv(const char* name);

// The whole environment of this process (entries without '=' skipped; the
// first of duplicate names, as getenv sees it).
std::map<std::string, std::string> CurrentEnvironment();

// Looks `argv0` up as execvp would, with PATH = `path_env` (empty: the OS
// default, "/bin:/usr/bin" on Linux); a name with a '/' is taken as a path.
// Returns the path to run. Errors: INVALID_ARGUMENT for an empty name;
// FAILED_PRECONDITION with the fix: "program 'x' not found in PATH (...)",
// "'x' is not executable: ..." (chmod +x, a full path, --no-python), "'x' is a
// directory". Blocks on a few stat() calls.
absl::StatusOr<std::string> FindExecutable(const std::string& argv0,
                                           const std::string& path_env);

// This process's id.
int ProcessId();

// The CPUs this process may run on (sorted); empty when the OS cannot say.
std::vector<int> CurrentCpuAffinity();

// Writes `text` to the process's standard error with as few writes as the OS
// allows (one, for a line of ordinary length), so that lines of several
// threads or processes never interleave. Unbuffered; errors are dropped.
void WriteToStderr(absl::string_view text);

// Makes writes to a closed pipe or socket fail with an error instead of
// ending the process (SIGPIPE ignored on Linux). Call once at start-up.
void IgnoreBrokenPipes();

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_ENV_H_
