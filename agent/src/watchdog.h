// The worker watchdog behind --worker-timeout: tells a slow worker from a stuck
// one by its progress file (MUSTER_PROGRESS_FILE). libmuster_comm updates the
// file's updated_unix_ms field on every collective and ReportProgress()
// (through a memory map, which does not reliably move the file's mtime); other
// programs may simply touch the file. Progress is the later of the two.
#ifndef MUSTER_AGENT_SRC_WATCHDOG_H_
#define MUSTER_AGENT_SRC_WATCHDOG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/clock.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::agent {

// The last sign of life in a progress file: max(mtime, updated_unix_ms when the
// file is in libmuster_comm's format). nullopt when the file does not exist.
std::optional<absl::Time> LastProgress(const std::string& path);

// A progress file's speed counters (format 2, muster/comm/progress.h):
// operations finished, time outside and inside them. nullopt when the file is
// missing or has none (format 1, a file a program only touches).
struct SpeedCounters {
  uint64_t finished = 0;
  uint64_t compute_us = 0;
  uint64_t wait_us = 0;
};
std::optional<SpeedCounters> ReadSpeedCounters(const std::string& path);

// Not thread-safe: the agent's loop owns it.
class Watchdog {
 public:
  // files[i] is local rank i's progress file. A worker that has not written its
  // file yet is measured from `start` (so a worker that never reports is caught
  // too). A rank is caught once silent for longer than timeout + grace: the
  // grace is musterd's turn when it watches the job's progress (RoundReady's
  // progress_watched, docs/architecture.md "Hang detection").
  Watchdog(absl::Duration timeout, std::vector<std::string> files,
           absl::Time start, absl::Duration grace = absl::ZeroDuration());

  // The local ranks silent for longer than the timeout at `now`; each is
  // returned once.
  std::vector<int> Check(absl::Time now);

  // How long local rank `local_rank` has been silent at `now`.
  absl::Duration Silence(int local_rank, absl::Time now) const;

  absl::Duration timeout() const { return timeout_; }

 private:
  const absl::Duration timeout_;
  const absl::Duration grace_;
  const std::vector<std::string> files_;
  const absl::Time start_;
  std::vector<bool> reported_;
};

// How much longer the agent's own watchdog waits when musterd watches the
// job's progress: musterd hears a node's silence with its next heartbeat (the
// interval the server's budget suggests is at most lease/4) and reads it every
// 250 ms; the rest covers ranks that stopped a moment apart.
absl::Duration ServerWatchGrace(absl::Duration lease);

// What the heartbeats tell musterd of this node's workers
// (Heartbeat.progress_age_ms): how long none of them has progressed.
// Thread-safe: the agent's loop sets it when workers start and stop, the
// session's heartbeat thread reads it.
class NodeProgress {
 public:
  // clock must outlive it.
  explicit NodeProgress(Clock* clock) : clock_(clock) {}

  // Workers of `round` run, with these progress files (files[i]: global rank
  // rank_offset + i), since `start`. Their speed counters go in every
  // heartbeat; their silence only when `report_silence` (--worker-timeout).
  void Watch(int64_t round, int rank_offset, std::vector<std::string> files,
             absl::Time start, bool report_silence);
  // None run (or none are watched).
  void Stop();
  // The silence of the least silent watched worker at `now`, and its round;
  // nullopt when none is watched.
  std::optional<std::pair<int64_t, absl::Duration>> Silence(
      absl::Time now) const;
  // Sets heartbeat's progress_age_ms (when silence is reported) and speeds
  // when workers of its round are watched.
  void Fill(v1::Heartbeat* heartbeat) const;

 private:
  Clock* const clock_;
  mutable absl::Mutex mu_;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int rank_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool report_silence_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> files_ ABSL_GUARDED_BY(mu_);
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_WATCHDOG_H_
