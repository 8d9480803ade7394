// The worker's end of muster's control channel (v1, the contract shared by
// the agent, libmuster_comm and muster.torch): a directory private to one
// worker process (MUSTER_CONTROL_DIR, set by the agent under
// --recovery=in-place) holding
//   round   written by the agent only (atomically): the round this worker
//           belongs to ("running"), or that its round ended and the next one
//           is forming ("changing");
//   hello   written by the worker once when the library opens the channel:
//           {"version": 1, "pid": P, "library": "libmuster_comm"}; the agent
//           keeps a worker in place only when it finds it.
// docs/architecture.md "Control channel" has the whole contract.
//
// RoundState is what a communicator (and the groups made from it) knows of
// its round: which one it formed on, whether it ended, and how many times it
// was recovered. Thread-safe.
#ifndef MUSTER_COMM_SRC_CONTROL_CHANNEL_H_
#define MUSTER_COMM_SRC_CONTROL_CHANNEL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "muster/common/control_round.h"

namespace muster::comm::internal {

// The contents of `round` (the shared codec, muster/common/control_round.h:
// common::ParseControlRound reads it, common::FormatControlRound writes it).
using RoundInfo = common::ControlRound;

class ControlChannel {
 public:
  // Opens the channel in `dir`: writes `hello` (once per process and
  // directory; mode 0600) and reads `round`. Errors: FAILED_PRECONDITION
  // naming the directory when it does not exist or `hello` cannot be written.
  static absl::StatusOr<std::shared_ptr<ControlChannel>> Open(
      const std::string& dir);

  const std::string& dir() const { return dir_; }

  // The current `round`; nullopt when it is absent or cannot be parsed (a
  // partial file reads as "no change"). One small read; caches the parse of
  // unchanged contents. Never blocks for long.
  std::optional<RoundInfo> Read();

 private:
  explicit ControlChannel(std::string dir) : dir_(std::move(dir)) {}

  const std::string dir_;
  absl::Mutex mu_;
  std::string last_text_ ABSL_GUARDED_BY(mu_);
  std::optional<RoundInfo> last_ ABSL_GUARDED_BY(mu_);
};

// The round a communicator formed on, shared by it and its groups.
class RoundState {
 public:
  RoundState(std::shared_ptr<ControlChannel> channel, int64_t seq,
             int64_t round)
      : channel_(std::move(channel)), seq_(seq), round_(round) {}

  ControlChannel& channel() { return *channel_; }
  const std::string& dir() const { return channel_->dir(); }

  // Bumped by every successful Recover: a group records it at creation and
  // is of an ended round once it differs.
  int64_t generation() const { return generation_.load(); }
  int64_t round() const {
    absl::MutexLock lock(&mu_);
    return round_;
  }

  // Whether the round of generation `generation` has ended: ended here (a
  // failure, RoundChanged) or a later generation exists. One atomic load.
  bool Ended(int64_t generation) const {
    return ended_.load(std::memory_order_acquire) ||
           generation != generation_.load(std::memory_order_acquire);
  }

  // RoundChanged(): reads `round` and ends the round when the file says so
  // (a newer seq that is "changing", or "running" with a greater round).
  bool CheckChanged();

  // Records that the round of generation `generation` ended because of `why`
  // (the first cause wins; a stale generation changes nothing).
  void End(int64_t generation, const absl::Status& why);

  // FAILED_PRECONDITION for a call `what` on a communicator formed on round
  // `formed_round`: "round 3 ended (node ... lost); call Recover()", or, for
  // a group, "... make the group again with NewGroup() after Recover()".
  absl::Status EndedStatus(absl::string_view what, int64_t formed_round,
                           bool is_group);

  // After a successful Recover: the new round is current.
  void Formed(int64_t seq, int64_t round);

  // The seq and round formed on.
  int64_t seq() const {
    absl::MutexLock lock(&mu_);
    return seq_;
  }

 private:
  const std::shared_ptr<ControlChannel> channel_;
  mutable absl::Mutex mu_;
  int64_t seq_ ABSL_GUARDED_BY(mu_);
  int64_t round_ ABSL_GUARDED_BY(mu_);
  // Why the current round ended, as reported to later calls.
  std::string ended_why_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> ended_{false};
  std::atomic<int64_t> generation_{0};
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_CONTROL_CHANNEL_H_
