// The agent's side of a worker's control channel (--recovery=in-place; the
// contract is docs/architecture.md, "Control channel"): a private directory
// per worker process holding `round`, which the agent writes (atomically,
// mode 0600, seq +1 at each write), and `hello`, which the worker's library
// writes once when it opens the channel. The agent keeps a worker across
// rounds only when its hello names its pid.
#ifndef MUSTER_AGENT_SRC_CONTROL_CHANNEL_H_
#define MUSTER_AGENT_SRC_CONTROL_CHANNEL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "muster/agent/worker_env.h"
#include "muster/common/control_round.h"

namespace muster::agent {

// What `round` says: "running" (the worker's round now) or "changing" (the
// round named ended, the next is forming; reason says why).
enum class ControlState { kRunning, kChanging };

// One worker's control directory.
class ControlChannel {
 public:
  // Creates `dir` (mode 0700 on POSIX). Errors: INTERNAL naming the directory.
  static absl::StatusOr<ControlChannel> Create(std::string dir);

  // Writes `round` from the worker's round values (its environment's), in
  // `state`, with `reason` (empty: none), seq one above the last write.
  // store_token goes to the file only (mode 0600), never to an error message.
  absl::Status Write(ControlState state, const WorkerEnvParams& params,
                     const std::string& reason);

  // The pid in `hello`, when the worker wrote a valid one (version 1).
  std::optional<int64_t> HelloPid() const;

  const std::string& dir() const { return dir_; }
  int64_t seq() const { return seq_; }

 private:
  explicit ControlChannel(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  int64_t seq_ = 0;
};

// What Write puts in `round` (the shared codec's struct,
// muster/common/control_round.h).
common::ControlRound ControlRoundOf(int64_t seq, ControlState state,
                                    const WorkerEnvParams& params,
                                    const std::string& reason);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_CONTROL_CHANNEL_H_
