// ProcessLauncher on Windows (issue: Windows). See README.md for the design.
#include "muster/platform/process.h"

namespace muster::platform {
namespace {

class WindowsLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<ProcessGroup>> Start(std::vector<ProcessSpec>,
                                                      LaunchOptions) override {
    return absl::UnimplementedError(
        "starting workers on Windows is not implemented yet");
  }
};

}  // namespace

ProcessLauncher* ProcessLauncher::Default() {
  static ProcessLauncher* launcher = new WindowsLauncher();
  return launcher;
}

absl::StatusOr<CommandResult> RunCommand(const CommandSpec&) {
  return absl::UnimplementedError("RunCommand is not implemented on Windows");
}

}  // namespace muster::platform
