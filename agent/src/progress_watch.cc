// --worker-timeout on the agent's side: the watchdog over this
// node's workers, the progress the heartbeats carry to musterd, and musterd's
// CaptureHang when no rank of the job progressed. Either way the hang report
// (agent/src/hang_report.h) is written before the workers are killed, and the
// round ends through WorkersFailed with the "hung: ..." reason.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/src/elastic_agent_impl.h"
#include "agent/src/hang_report.h"
#include "muster/common/logging.h"

namespace muster::agent {

void ElasticAgent::Impl::WatchProgress(std::vector<std::string> files) {
  watchdog_.reset();
  progress_->Stop();
  const absl::Time now = clock_->Now();
  const bool timed = config_.worker_timeout > absl::ZeroDuration();
  // The heartbeats carry the workers' speed counters whatever the timeout
  // (musterd's straggler scores); their silence only under --worker-timeout.
  progress_->Watch(round_.round(), round_.rank_offset(), files, now, timed);
  if (!timed) return;
  // When musterd watches the round too, it decides a job-wide hang and every
  // node reports it at once; this watchdog, a grace later, still catches a
  // rank stuck while others progress, and a musterd that does not answer.
  const absl::Duration grace = round_.progress_watched()
                                   ? ServerWatchGrace(fence_->lease())
                                   : absl::ZeroDuration();
  watchdog_ = std::make_unique<Watchdog>(config_.worker_timeout,
                                         std::move(files), now, grace);
}

std::vector<int> ElasticAgent::Impl::CheckWatchdog() {
  if (watchdog_ == nullptr || clock_->Now() < next_watchdog_check_) return {};
  // A few stat() calls per check; no need to make them at the loop's pace.
  next_watchdog_check_ = clock_->Now() + std::min(config_.monitor_interval,
                                                  watchdog_->timeout() / 10);
  return watchdog_->Check(clock_->Now());
}

void ElasticAgent::Impl::KillHung(const std::vector<int>& hung) {
  // The hang report: stacks before the kill.
  std::vector<int> ranks;
  for (int local : hung) ranks.push_back(round_.rank_offset() + local);
  hang_report_ =
      WriteHangReport(*stacks_, config_.run_id, run_dir_, attempt_, ranks);
  for (int local : hung) {
    std::string reason = absl::StrCat(
        "hung: no progress for ", absl::FormatDuration(watchdog_->timeout()),
        " (--worker-timeout); killed by the watchdog");
    MUSTER_LOG(ERROR) << "worker local rank " << local << " (rank "
                      << round_.rank_offset() + local << ") " << reason;
    group_->Kill(local, reason);
  }
}

void ElasticAgent::Impl::CaptureHang(const std::string& why) {
  MUSTER_LOG(ERROR) << "round " << round_.round() << ": " << why
                    << "; capturing this node's stacks, then stopping its "
                       "workers";
  std::vector<int> ranks;
  for (int local = 0; local < config_.nproc_per_node; ++local)
    ranks.push_back(round_.rank_offset() + local);
  hang_report_ = WriteHangReport(*stacks_, config_.run_id, run_dir_, attempt_,
                                 ranks, HangTrigger{why});
  // The watchdog has nothing left to add this round.
  watchdog_.reset();
  progress_->Stop();
  const std::string reason = absl::StrCat("hung: ", why);
  for (int local = 0; local < config_.nproc_per_node; ++local)
    group_->Kill(local, reason);
}

}  // namespace muster::agent
