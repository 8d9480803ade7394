// RunCommand on Windows: the command in its own job object, stdout read on a
// thread, the job terminated at the deadline.
#include <windows.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "platform/windows/spawn_windows.h"

namespace muster::platform {

absl::StatusOr<CommandResult> RunCommand(const CommandSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty())
    return absl::InvalidArgumentError("no command to run (empty argv)");
  // argv[0] is looked up in the launcher's own PATH.
  auto resolved = windows::ResolveCommand(
      spec.argv, {{"PATH", GetEnv("PATH").value_or("")}});
  if (!resolved.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run ", spec.argv[0], ": ", resolved.status().message()));
  }
  windows::SpawnRequest request;
  request.command = *std::move(resolved);
  request.env = spec.env;
  request.name = spec.argv[0];
  request.pipe_stderr = false;
  auto spawned = windows::SpawnInJob(request);
  if (!spawned.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run ", spec.argv[0], ": ", spawned.status().message()));
  }
  CommandResult result;
  std::string output;
  const size_t max_output = spec.max_output;
  HANDLE pipe = spawned->stdout_r.get();
  std::thread reader([pipe, max_output, &output] {
    char buf[16 * 1024];
    DWORD n = 0;
    while (ReadFile(pipe, buf, sizeof(buf), &n, nullptr)) {
      const size_t room = max_output - std::min(max_output, output.size());
      output.append(buf, std::min<size_t>(n, room));
    }
  });
  const DWORD ms = static_cast<DWORD>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(spec.timeout), 0, INFINITE - 1));
  bool killed = false;
  if (WaitForSingleObject(spawned->process.get(), ms) != WAIT_OBJECT_0) {
    TerminateJobObject(spawned->job.get(), windows::kKilledExitCode);
    WaitForSingleObject(spawned->process.get(), 10000);
    killed = true;
  } else {
    // What it started must not outlive it (it would hold the pipe open).
    TerminateJobObject(spawned->job.get(), windows::kKilledExitCode);
  }
  reader.join();
  DWORD code = 0;
  GetExitCodeProcess(spawned->process.get(), &code);
  result.output = std::move(output);
  if (killed) {
    result.timed_out = true;
    result.signal = kSignalKill;
  } else {
    result.exit_code = static_cast<int>(code);
  }
  return result;
}

}  // namespace muster::platform
