// `muster status --rdzv-endpoint=H:P [JOB] [--json]`: what a rendezvous server
// knows — jobs, their state and round, members (host, address, ranks),
// restarts, the last failure, stragglers and excluded nodes.
#ifndef MUSTER_CLI_STATUS_H_
#define MUSTER_CLI_STATUS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::cli {

// Runs the subcommand; args are the words after "status". Returns the exit
// status: 0, 2 for bad flags, 3 when the server cannot be reached, 1 when JOB
// is unknown to it. Follows every page of GetStatus and prints every job and
// the total. Blocks up to --timeout (default 5 s) to connect and for each page.
int RunStatus(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env);

// The human form of a status response (tests check it): a header line with
// the server's total_jobs ("musterd at H:P (version V): N jobs", saying how
// many are not listed when fewer came), then each job: its members, waiting
// agents, last failure, stragglers and excluded nodes. Clock times ("since
// 12:34:56") are in `tz`.
std::string FormatStatus(const v1::GetStatusResponse& status,
                         const std::string& endpoint,
                         absl::TimeZone tz = absl::LocalTimeZone());

}  // namespace muster::cli

#endif  // MUSTER_CLI_STATUS_H_
