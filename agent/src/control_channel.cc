#include "agent/src/control_channel.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "muster/platform/files.h"

namespace muster::agent {

absl::StatusOr<ControlChannel> ControlChannel::Create(std::string dir) {
  if (absl::Status s = platform::MakePrivateDirectory(dir); !s.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot create the worker's control directory: ", s.message(),
        " (check --log-dir)"));
  }
  return ControlChannel(std::move(dir));
}

common::ControlRound ControlRoundOf(int64_t seq, ControlState state,
                                    const WorkerEnvParams& p,
                                    const std::string& reason) {
  return common::ControlRound{.seq = seq,
                              .running = state == ControlState::kRunning,
                              .round = p.round,
                              .rank = p.rank,
                              .world_size = p.world_size,
                              .local_rank = p.local_rank,
                              .local_world_size = p.local_world_size,
                              .group_rank = p.group_rank,
                              .group_world_size = p.group_world_size,
                              .role_rank = p.role_rank,
                              .role_world_size = p.role_world_size,
                              .master_addr = p.master_addr,
                              .master_port = p.master_port,
                              .store_endpoint = p.store_endpoint,
                              .store_prefix = p.store_prefix,
                              .store_token = p.store_token,
                              .restart_count = p.restart_count,
                              .reason = reason};
}

absl::Status ControlChannel::Write(ControlState state,
                                   const WorkerEnvParams& params,
                                   const std::string& reason) {
  const int64_t seq = seq_ + 1;
  const std::string text =
      common::FormatControlRound(ControlRoundOf(seq, state, params, reason));
  // Not flushed to the disk: the file means nothing once the agent and its
  // workers are gone, and two flushes per write (10-25 ms each on a busy
  // disk, one file per worker) were most of the agent's part of an in-place
  // recovery.
  absl::Status s = platform::WriteFileAtomically(
      dir_ + "/round", text, /*mode=*/0600, platform::Durability::kVolatile);
  if (!s.ok()) {
    // The platform's message names the path and the OS's reason, never the
    // contents (the Store credential).
    return absl::InternalError(absl::StrCat(
        "cannot write the worker's control channel: ", s.message()));
  }
  seq_ = seq;
  return absl::OkStatus();
}

std::optional<int64_t> ControlChannel::HelloPid() const {
  std::ifstream in(dir_ + "/hello", std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  return common::ParseControlHelloPid(buf.str());
}

}  // namespace muster::agent
