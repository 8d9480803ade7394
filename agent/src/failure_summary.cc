#include "agent/src/failure_summary.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "muster/platform/signals.h"

namespace muster::agent {

std::string DescribeExit(int exit_code, int signal) {
  if (signal != 0) {
    return absl::StrCat("killed by ", platform::SignalName(signal));
  }
  return platform::DescribeExitCode(exit_code);
}

std::string FormatTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3S%Ez",
                          absl::FromUnixMillis(unix_ms), absl::LocalTimeZone());
}

std::string FormatFailureSummary(const v1::JobFailed& failed,
                                 const SummaryContext& context) {
  std::string out = absl::StrCat("\n", std::string(72, '='), "\n",
                                 "muster: job '", context.run_id, "' FAILED\n",
                                 "root cause: ", failed.root_cause(), "\n");
  bool module_missing = false;
  if (failed.failures_size() > 0) {
    absl::StrAppend(&out, "failures of the last round:\n");
    for (const v1::WorkerFailure& f : failed.failures()) {
      absl::StrAppend(
          &out, "  rank ", f.global_rank(), " (local rank ", f.local_rank(),
          ") on ", f.hostname(), ": ", DescribeExit(f.exit_code(), f.signal()),
          ", pid ", f.pid(), ", at ", FormatTime(f.timestamp_unix_ms()), "\n");
      if (!f.error_message().empty()) {
        absl::StrAppend(&out, "    error: ", f.error_message(), "\n");
      }
      if (!f.traceback().empty()) {
        // As torchrun's summary: the worker's own traceback, indented.
        absl::StrAppend(&out, "    traceback:\n");
        for (absl::string_view line : absl::StrSplit(
                 absl::StripTrailingAsciiWhitespace(f.traceback()), '\n')) {
          absl::StrAppend(&out, "      ", line, "\n");
        }
      }
      const std::string text = absl::StrCat(f.error_message(), f.traceback());
      if (!context.python_interpreter.empty() &&
          (absl::StrContains(text, "ModuleNotFoundError") ||
           absl::StrContains(text, "No module named"))) {
        module_missing = true;
      }
    }
  }
  if (module_missing) {
    absl::StrAppend(&out, "the workers ran Python ", context.python_interpreter,
                    " (", context.python_source,
                    "); if the module is installed for another interpreter, "
                    "choose it with --python=PATH or PYTHON_EXEC=PATH\n");
  }
  if (!context.hang_report.empty()) {
    absl::StrAppend(&out, std::string(72, '-'), "\n", context.hang_report,
                    std::string(72, '-'), "\n");
  }
  if (!context.run_dir.empty())
    absl::StrAppend(&out, "worker logs and error files: ", context.run_dir,
                    "\n");
  absl::StrAppend(&out, std::string(72, '='), "\n");
  return out;
}

}  // namespace muster::agent
