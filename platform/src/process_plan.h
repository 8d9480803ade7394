// What the process launchers of every OS decide the same way before and after
// the OS is involved: the names and checks of the specs, where each output
// stream goes, and the GroupStatus of the exits recorded so far. Private to
// platform (posix/process_group.cc, windows/process_windows.cc).
#ifndef MUSTER_PLATFORM_SRC_PROCESS_PLAN_H_
#define MUSTER_PLATFORM_SRC_PROCESS_PLAN_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "muster/platform/process.h"

namespace muster::platform::internal {

// The names error messages use ("worker local_rank 3", else "process 2"), in
// spec order. Errors: INVALID_ARGUMENT for no specs or an empty argv.
absl::StatusOr<std::vector<std::string>> CheckSpecs(
    const std::vector<ProcessSpec>& specs);

// Where one output stream goes, decided before anything is opened.
struct StreamPlan {
  size_t proc_index = 0;
  bool is_stderr = false;
  std::string prefix;
  int console_fd = -1;  // LaunchOptions' console descriptor; -1: none
  std::string file;     // the stream's own log file; empty: none
  // Also to the shared filtered file of its kind (FilteredFile).
  bool filtered = false;
};

// Two plans per spec (stdout, then stderr), in spec order.
std::vector<StreamPlan> PlanStreams(const std::vector<ProcessSpec>& specs,
                                    const LaunchOptions& options);

// The shared filtered file of stdout (is_stderr false) or stderr; empty when
// that kind has no filters or no file.
std::string FilteredFile(const LaunchOptions& options, bool is_stderr);

// The status of a group from the exits recorded so far: failures first, then
// by end time; kFailed when any failed, kSucceeded when every process ended.
GroupStatus MakeGroupStatus(std::vector<ProcessExit> exits, bool any_failed,
                            bool all_ended);

}  // namespace muster::platform::internal

#endif  // MUSTER_PLATFORM_SRC_PROCESS_PLAN_H_
