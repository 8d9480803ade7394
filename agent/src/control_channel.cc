#include "agent/src/control_channel.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "muster/platform/files.h"
#include "nlohmann/json.hpp"

namespace muster::agent {

absl::StatusOr<ControlChannel> ControlChannel::Create(std::string dir) {
  if (absl::Status s = platform::MakePrivateDirectory(dir); !s.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot create the worker's control directory: ", s.message(),
        " (check --log-dir)"));
  }
  return ControlChannel(std::move(dir));
}

std::string FormatControlRound(int64_t seq, ControlState state,
                               const WorkerEnvParams& p,
                               const std::string& reason) {
  nlohmann::json j = {
      {"version", 1},
      {"seq", seq},
      {"state", state == ControlState::kRunning ? "running" : "changing"},
      {"round", p.round},
      {"rank", p.rank},
      {"world_size", p.world_size},
      {"local_rank", p.local_rank},
      {"local_world_size", p.local_world_size},
      {"group_rank", p.group_rank},
      {"group_world_size", p.group_world_size},
      {"role_rank", p.role_rank},
      {"role_world_size", p.role_world_size},
      {"master_addr", p.master_addr},
      {"master_port", p.master_port},
      {"store_endpoint", p.store_endpoint},
      {"store_prefix", p.store_prefix},
      {"restart_count", p.restart_count},
  };
  if (!p.store_token.empty()) j["store_token"] = p.store_token;
  if (!reason.empty()) j["reason"] = reason;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::Status ControlChannel::Write(ControlState state,
                                   const WorkerEnvParams& params,
                                   const std::string& reason) {
  const int64_t seq = seq_ + 1;
  std::string text = FormatControlRound(seq, state, params, reason);
  text.push_back('\n');
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
  nlohmann::json j =
      nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto version = j.find("version");
  auto pid = j.find("pid");
  if (version == j.end() || !version->is_number_integer() || *version != 1 ||
      pid == j.end() || !pid->is_number_integer()) {
    return std::nullopt;
  }
  return pid->get<int64_t>();
}

}  // namespace muster::agent
