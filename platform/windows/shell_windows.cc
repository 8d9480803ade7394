#include "muster/platform/shell.h"

namespace muster::platform {

// /d: no AutoRun commands; /s: the command line is taken as it is.
std::vector<std::string> ShellArgv(const std::string& command) {
  return {"cmd.exe", "/d", "/s", "/c", command};
}

}  // namespace muster::platform
