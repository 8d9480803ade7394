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

#include "absl/time/time.h"

namespace muster::agent {

// The last sign of life in a progress file: max(mtime, updated_unix_ms when the
// file is in libmuster_comm's format). nullopt when the file does not exist.
std::optional<absl::Time> LastProgress(const std::string& path);

// Not thread-safe: the agent's loop owns it.
class Watchdog {
 public:
  // files[i] is local rank i's progress file. A worker that has not written its
  // file yet is measured from `start` (so a worker that never reports is caught
  // too).
  Watchdog(absl::Duration timeout, std::vector<std::string> files,
           absl::Time start);

  // The local ranks silent for longer than the timeout at `now`; each is
  // returned once.
  std::vector<int> Check(absl::Time now);

  // How long local rank `local_rank` has been silent at `now`.
  absl::Duration Silence(int local_rank, absl::Time now) const;

  absl::Duration timeout() const { return timeout_; }

 private:
  const absl::Duration timeout_;
  const std::vector<std::string> files_;
  const absl::Time start_;
  std::vector<bool> reported_;
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_WATCHDOG_H_
