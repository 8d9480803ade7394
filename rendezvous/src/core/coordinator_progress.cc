// The progress watch behind --worker-timeout: each agent reports in
// its heartbeats how long none of its workers has progressed
// (Heartbeat.progress_age_ms); when every member of a running round says so
// for at least the job's worker timeout, no rank anywhere is progressing: a
// job-wide hang. musterd then tells every member to capture its workers'
// stacks, write the hang report and stop them (CaptureHang), so that every
// node's report is taken at the same moment for the same reason. The round
// then ends through the members' WorkersFailed, as for the agent's own
// watchdog (docs/architecture.md, "Hang detection").
//
// The decision uses the agents' own measure of silence, not a time compared
// across clocks: a node whose heartbeats come slowly is judged by what it
// last said, never by a guess of what it did since.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "rendezvous/src/core/coordinator_internal.h"

namespace muster::rendezvous {

absl::Time Coordinator::Impl::CheckProgress(Job& job, absl::Time now) {
  if (job.worker_timeout <= absl::ZeroDuration() ||
      job.hang_round == job.round) {
    return absl::InfiniteFuture();
  }
  if (now < job.next_progress_check) return job.next_progress_check;
  job.next_progress_check = now + kProgressCheckInterval;
  std::vector<ConnectionId> stuck;
  absl::Duration least = absl::InfiniteDuration();
  for (const Member& m : job.members) {
    if (job.succeeded.contains(m.rank.node_id)) continue;  // its ranks are done
    auto node = job.nodes.find(m.rank.node_id);
    if (node == job.nodes.end()) return job.next_progress_check;
    const std::optional<ProgressMark> mark =
        progress_.Visit(node->second.conn, [](ProgressMark& p) { return p; });
    // Not reported for this round yet (workers starting, an older agent):
    // nothing is known of it, so nothing is decided.
    if (!mark.has_value() || mark->round != job.round ||
        mark->silence < job.worker_timeout) {
      return job.next_progress_check;
    }
    least = std::min(least, mark->silence);
    stuck.push_back(node->second.conn);
  }
  if (stuck.empty()) return job.next_progress_check;
  job.hang_round = job.round;
  const std::string reason =
      absl::StrCat("musterd saw no progress from any rank of job ", job.id,
                   " for ", FormatSeconds(job.worker_timeout),
                   " (--worker-timeout)", StragglerNote(job));
  MUSTER_LOG(WARNING) << "job " << job.id << ": round " << job.round
                      << ": no progress from any rank for "
                      << FormatSeconds(job.worker_timeout)
                      << " (--worker-timeout; the least silent node: "
                      << absl::FormatDuration(
                             absl::Trunc(least, absl::Milliseconds(1)))
                      << "); asking its " << stuck.size()
                      << " agents for the hang report and to stop the round";
  auto msg = std::make_shared<v1::ServerMessage>();
  msg->set_epoch(epoch());
  msg->mutable_capture_hang()->set_round(job.round);
  msg->mutable_capture_hang()->set_reason(reason);
  for (ConnectionId conn : stuck) Send(conn, msg);
  return absl::InfiniteFuture();
}

}  // namespace muster::rendezvous
