// The argv that runs a command line through the system's shell: how
// `--health-check=CMD` runs its command (agent/src/health_check.h).
#ifndef MUSTER_PLATFORM_SHELL_H_
#define MUSTER_PLATFORM_SHELL_H_

#include <string>
#include <vector>

namespace muster::platform {

// Linux: {"sh", "-c", command} (sh from PATH, else /bin). Windows: {"cmd.exe",
// "/d", "/s", "/c", command}.
std::vector<std::string> ShellArgv(const std::string& command);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_SHELL_H_
