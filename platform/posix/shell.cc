#include "muster/platform/shell.h"

namespace muster::platform {

std::vector<std::string> ShellArgv(const std::string& command) {
  // A name: ToolRunner looks it up in PATH, then the system folders.
  return {"sh", "-c", command};
}

}  // namespace muster::platform
