// The hang report: when --worker-timeout fires (the agent's watchdog, or
// musterd's CaptureHang when no rank of the job progresses), the agent reads
// every local worker's stacks before it kills the hung ones, groups them
// (muster/rendezvous/stack_groups.h) and writes the report into the job's log
// directory, hang_report_attempt_<n>.txt with hang_report_attempt_<n>.json
// beside it; the failure summary then shows the grouped stacks.
#ifndef MUSTER_AGENT_SRC_HANG_REPORT_H_
#define MUSTER_AGENT_SRC_HANG_REPORT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/src/stack_capture.h"

namespace muster::agent {

// How long the capture may take before the watchdog kills anyway.
inline constexpr absl::Duration kHangCaptureTimeout = absl::Seconds(10);

// Who saw the hang: the agent's watchdog, or musterd (CaptureHang, whose
// reason line the report quotes).
struct HangTrigger {
  // Empty: the watchdog's. Else musterd's reason (CaptureHang.reason).
  std::string musterd_reason;
};

// Captures (up to kHangCaptureTimeout), writes the two files when run_dir is
// not empty, and returns the text for the summary: which local workers hung
// and why (the trigger's reason line), the grouped stacks, and where the full
// report is. The JSON has "trigger" ("watchdog" or "musterd") and "reason".
std::string WriteHangReport(StackCapturer& capturer, const std::string& job,
                            const std::string& run_dir, int attempt,
                            const std::vector<int>& hung_ranks,
                            const HangTrigger& trigger = {});

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_HANG_REPORT_H_
