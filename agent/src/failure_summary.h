// The words the agent uses for how workers ended: one exit ("killed by
// SIGKILL"), a time, and the failure summary every agent prints when the job
// fails (torchrun's layout: root cause, each failure with its error and
// traceback, where the logs are).
#ifndef MUSTER_AGENT_SRC_FAILURE_SUMMARY_H_
#define MUSTER_AGENT_SRC_FAILURE_SUMMARY_H_

#include <cstdint>
#include <string>

#include "muster/v1/rendezvous.pb.h"

namespace muster::agent {

// "killed by SIGTERM" / "exited with code 3".
std::string DescribeExit(int exit_code, int signal);

// Local time with milliseconds and the zone: 2026-11-24T08:00:00.123+00:00.
std::string FormatTime(int64_t unix_ms);

// What to say about the Python interpreter and the logs, besides the failures.
struct SummaryContext {
  std::string run_id;
  // Empty when the program does not run through Python.
  std::string python_interpreter;
  std::string python_source;
  // The job's log directory (empty: none).
  std::string run_dir;
  // The watchdog's hang report (agent/src/hang_report.h): grouped stacks and
  // the odd ranks out; empty when there is none.
  std::string hang_report;
};

// The summary, framed by lines of '=', ending with a newline.
std::string FormatFailureSummary(const v1::JobFailed& failed,
                                 const SummaryContext& context);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_FAILURE_SUMMARY_H_
