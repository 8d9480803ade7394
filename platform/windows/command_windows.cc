// RunCommand on Windows: the command in its own job object, stdout read on a
// thread, the job terminated at the deadline. WaitWithOutput is shared with
// the ToolRunner (tool_runner_windows.cc).
#include <windows.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "platform/windows/spawn_windows.h"

namespace muster::platform {

namespace windows {

Finished WaitWithOutput(Spawned& spawned, absl::Duration timeout,
                        size_t max_output) {
  Finished f;
  std::string& output = f.output;
  HANDLE pipe = spawned.stdout_r.get();
  std::thread reader([pipe, max_output, &output] {
    char buf[16 * 1024];
    DWORD n = 0;
    while (ReadFile(pipe, buf, sizeof(buf), &n, nullptr)) {
      const size_t room = max_output - std::min(max_output, output.size());
      output.append(buf, std::min<size_t>(n, room));
    }
  });
  const DWORD ms = static_cast<DWORD>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, INFINITE - 1));
  if (WaitForSingleObject(spawned.process.get(), ms) != WAIT_OBJECT_0) {
    TerminateJobObject(spawned.job.get(), kKilledExitCode);
    WaitForSingleObject(spawned.process.get(), 10000);
    f.timed_out = true;
  } else {
    // What it started must not outlive it (it would hold the pipe open).
    TerminateJobObject(spawned.job.get(), kKilledExitCode);
  }
  reader.join();
  GetExitCodeProcess(spawned.process.get(), &f.exit_code);
  return f;
}

}  // namespace windows

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
  windows::Finished f =
      windows::WaitWithOutput(*spawned, spec.timeout, spec.max_output);
  CommandResult result;
  result.output = std::move(f.output);
  if (f.timed_out) {
    result.timed_out = true;
    result.signal = kSignalKill;
  } else {
    result.exit_code = static_cast<int>(f.exit_code);
  }
  return result;
}

}  // namespace muster::platform
