#include "platform/src/process_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace muster::platform::internal {

absl::StatusOr<std::vector<std::string>> CheckSpecs(
    const std::vector<ProcessSpec>& specs) {
  if (specs.empty()) return absl::InvalidArgumentError("no processes to start");
  std::vector<std::string> names;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ProcessSpec& p = specs[i];
    names.push_back(p.name.empty() ? absl::StrCat("process ", i) : p.name);
    if (p.argv.empty() || p.argv[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(names.back(), " has no program to run (empty argv)"));
    }
  }
  return names;
}

std::string FilteredFile(const LaunchOptions& options, bool is_stderr) {
  const std::vector<std::string>& filters =
      is_stderr ? options.stderr_filters : options.stdout_filters;
  const std::string& file =
      is_stderr ? options.filtered_stderr_file : options.filtered_stdout_file;
  return filters.empty() ? std::string() : file;
}

std::vector<StreamPlan> PlanStreams(const std::vector<ProcessSpec>& specs,
                                    const LaunchOptions& options) {
  std::vector<StreamPlan> plans;
  for (size_t index = 0; index < specs.size(); ++index) {
    const ProcessSpec& p = specs[index];
    for (bool is_stderr : {false, true}) {
      const StreamRoute& route = is_stderr ? p.stderr_route : p.stdout_route;
      StreamPlan plan;
      plan.proc_index = index;
      plan.is_stderr = is_stderr;
      if (route.prefixed) plan.prefix = p.line_prefix;
      if (route.console) {
        plan.console_fd =
            is_stderr ? options.console_stderr : options.console_stdout;
      }
      plan.file = route.file;
      plan.filtered =
          route.filtered && !FilteredFile(options, is_stderr).empty();
      plans.push_back(std::move(plan));
    }
  }
  return plans;
}

GroupStatus MakeGroupStatus(std::vector<ProcessExit> exits, bool any_failed,
                            bool all_ended) {
  GroupStatus status;
  status.exits = std::move(exits);
  std::stable_sort(status.exits.begin(), status.exits.end(),
                   [](const ProcessExit& a, const ProcessExit& b) {
                     if (a.succeeded() != b.succeeded()) return !a.succeeded();
                     return a.end_time < b.end_time;
                   });
  if (any_failed) {
    status.state = GroupState::kFailed;
  } else if (all_ended) {
    status.state = GroupState::kSucceeded;
  }
  return status;
}

}  // namespace muster::platform::internal
