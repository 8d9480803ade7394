// SystemToolRunner() on Windows (netsh for `muster doctor`): the tool found
// as the launcher finds programs (PATH and PATHEXT, then the system
// directories), started by SpawnInJob in its own kill-on-close job object
// with stdin on NUL and stderr into the stdout pipe, read until it exits or
// the deadline passes, when the whole job is terminated (a stuck tool and
// whatever it started). The output is returned as the tool printed it (the
// console's OEM code page for netsh: plain ASCII in English).
#include <windows.h>

#include <string>
#include <vector>

#include "muster/platform/tool_runner.h"
#include "platform/windows/spawn_windows.h"

namespace muster::platform {
namespace {

constexpr size_t kMaxOutput = 4u << 20;

class WindowsToolRunner final : public ToolRunner {
 public:
  ToolResult Run(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env,
                 absl::Duration timeout) override {
    ToolResult res;
    if (argv.empty() || argv[0].empty()) return res;
    // Not found (or nothing Windows can run): found stays false, the reason
    // is the output.
    auto resolved = windows::ResolveCommand(argv, env);
    if (!resolved.ok()) {
      res.output = std::string(resolved.status().message());
      return res;
    }
    res.found = true;
    res.path = resolved->program;
    windows::SpawnRequest request;
    request.command = *std::move(resolved);
    request.env = env;
    request.name = argv[0];
    request.pipe_stderr = false;
    request.stderr_to_stdout = true;
    auto spawned = windows::SpawnInJob(request);
    if (!spawned.ok()) {
      res.output = std::string(spawned.status().message());
      return res;
    }
    windows::Finished f =
        windows::WaitWithOutput(*spawned, timeout, kMaxOutput);
    res.output = std::move(f.output);
    res.timed_out = f.timed_out;
    // A killed tool reads as on Linux: 128 + SIGKILL (kKilledExitCode).
    res.exit_code = static_cast<int>(f.exit_code);
    return res;
  }
};

}  // namespace

ToolRunner& SystemToolRunner() {
  static WindowsToolRunner* runner = new WindowsToolRunner();
  return *runner;
}

}  // namespace muster::platform
