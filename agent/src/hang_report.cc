#include "agent/src/hang_report.h"

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/logging.h"
#include "muster/rendezvous/stack_groups.h"

namespace muster::agent {

std::string WriteHangReport(StackCapturer& capturer, const std::string& job,
                            const std::string& run_dir, int attempt,
                            const std::vector<int>& hung_ranks,
                            const HangTrigger& trigger) {
  const v1::StacksReport report = capturer.Capture(kHangCaptureTimeout);
  const std::vector<v1::RankStacks> ranks(report.ranks().begin(),
                                          report.ranks().end());
  std::vector<std::string> missing;
  if (!report.error().empty()) missing.push_back(report.error());
  const bool musterd = !trigger.musterd_reason.empty();
  const std::string reason =
      musterd ? absl::StrCat(trigger.musterd_reason,
                             "; the stacks of this "
                             "node's workers (rank",
                             hung_ranks.size() == 1 ? " " : "s ",
                             rendezvous::RankRanges(hung_ranks),
                             ") just before they were stopped")
              : absl::StrCat("rank", hung_ranks.size() == 1 ? " " : "s ",
                             rendezvous::RankRanges(hung_ranks),
                             " made no progress for --worker-timeout; the "
                             "stacks of this node's workers just before the "
                             "watchdog killed them");
  std::string text =
      absl::StrCat("hang report: ", reason, ":\n",
                   rendezvous::FormatStackGroups(job, ranks, missing));
  if (run_dir.empty()) return text;
  const std::string base =
      absl::StrCat(run_dir, "/hang_report_attempt_", attempt);
  nlohmann::json json = rendezvous::StackGroupsJson(job, ranks, missing);
  json["hung_ranks"] = hung_ranks;
  json["trigger"] = musterd ? "musterd" : "watchdog";
  json["reason"] = reason;
  std::ofstream(base + ".txt") << text;
  std::ofstream(base + ".json") << json.dump(2) << "\n";
  MUSTER_LOG(INFO) << "hang report written to " << base << ".txt (and .json)";
  absl::StrAppend(&text, "full report: ", base, ".txt (JSON: ", base,
                  ".json)\n");
  return text;
}

}  // namespace muster::agent
