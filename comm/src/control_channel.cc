#include "comm/src/control_channel.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "muster/platform/env.h"
#include "muster/platform/files.h"
#include "nlohmann/json.hpp"

namespace muster::comm::internal {
namespace {

using Json = nlohmann::json;

// Reads field `name` of `j` into `out` when present. INVALID_ARGUMENT when it
// has the wrong type, or is absent and `required`.
template <typename T>
absl::Status Field(const Json& j, const char* name, bool required, T* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("the round file lacks \"", name, "\""));
  }
  constexpr bool kString = std::is_same_v<T, std::string>;
  if (kString ? !it->is_string() : !it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the round file's \"", name, "\" is not ",
                     kString ? "a string" : "an integer"));
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

#define MUSTER_FIELD(name, required, out)                      \
  do {                                                         \
    absl::Status field_status = Field(j, name, required, out); \
    if (!field_status.ok()) return field_status;               \
  } while (0)

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

absl::StatusOr<RoundInfo> ParseRound(absl::string_view text) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the round file is not a JSON object");
  }
  int version = 0;
  MUSTER_FIELD("version", true, &version);
  if (version != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the round file has version ", version,
        "; this libmuster_comm speaks version 1 of the control channel "
        "(update muster and libmuster_comm together)"));
  }
  RoundInfo info;
  std::string state;
  MUSTER_FIELD("seq", true, &info.seq);
  MUSTER_FIELD("state", true, &state);
  if (state != "running" && state != "changing") {
    return absl::InvalidArgumentError(absl::StrCat(
        "the round file's state '", state, "' is not running or changing"));
  }
  info.running = state == "running";
  MUSTER_FIELD("round", true, &info.round);
  MUSTER_FIELD("rank", true, &info.rank);
  MUSTER_FIELD("world_size", true, &info.world_size);
  MUSTER_FIELD("local_rank", false, &info.local_rank);
  MUSTER_FIELD("local_world_size", false, &info.local_world_size);
  MUSTER_FIELD("group_rank", false, &info.group_rank);
  MUSTER_FIELD("group_world_size", false, &info.group_world_size);
  MUSTER_FIELD("master_addr", false, &info.master_addr);
  MUSTER_FIELD("master_port", false, &info.master_port);
  MUSTER_FIELD("store_endpoint", info.running, &info.store_endpoint);
  MUSTER_FIELD("store_prefix", info.running, &info.store_prefix);
  MUSTER_FIELD("store_token", false, &info.store_token);
  MUSTER_FIELD("restart_count", false, &info.restart_count);
  MUSTER_FIELD("reason", false, &info.reason);
  if (info.running &&
      (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the round file's rank ", info.rank, " is outside [0, ",
                     info.world_size, ")"));
  }
  return info;
}

#undef MUSTER_FIELD

std::string FormatRound(const RoundInfo& info) {
  Json j = {{"version", 1},
            {"seq", info.seq},
            {"state", info.running ? "running" : "changing"},
            {"round", info.round},
            {"rank", info.rank},
            {"world_size", info.world_size},
            {"local_rank", info.local_rank},
            {"local_world_size", info.local_world_size},
            {"group_rank", info.group_rank},
            {"group_world_size", info.group_world_size},
            {"master_addr", info.master_addr},
            {"master_port", info.master_port},
            {"store_endpoint", info.store_endpoint},
            {"store_prefix", info.store_prefix},
            {"restart_count", info.restart_count},
            {"reason", info.reason}};
  if (!info.store_token.empty()) j["store_token"] = info.store_token;
  return j.dump();
}

absl::StatusOr<std::shared_ptr<ControlChannel>> ControlChannel::Open(
    const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MUSTER_CONTROL_DIR=", dir,
        " is not a directory: the agent creates it for each worker under "
        "--recovery=in-place; unset it to run without the control channel"));
  }
  // Once per process and directory: the agent compares the pid with the
  // process it started, and a second communicator changes nothing.
  static absl::Mutex* mu = new absl::Mutex;
  static std::set<std::string>* said_hello = new std::set<std::string>;
  {
    absl::MutexLock lock(mu);
    if (said_hello->count(dir) == 0) {
      const std::string hello = Json{
          {"version", 1},
          {"pid", platform::ProcessId()},
          {"library",
           "libmuster_comm"}}.dump();
      // Not flushed to the disk: it means nothing once this process is gone.
      absl::Status written = platform::WriteFileAtomically(
          dir + "/hello", hello, 0600, platform::Durability::kVolatile);
      if (!written.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("opening the control channel in ", dir,
                         ": cannot write hello: ", written.message()));
      }
      said_hello->insert(dir);
    }
  }
  return std::shared_ptr<ControlChannel>(new ControlChannel(dir));
}

std::optional<RoundInfo> ControlChannel::Read() {
  std::string text = ReadSmallFile(dir_ + "/round");
  absl::MutexLock lock(&mu_);
  if (text == last_text_) return last_;
  absl::StatusOr<RoundInfo> info = ParseRound(text);
  last_text_ = std::move(text);
  last_ = info.ok() ? std::optional<RoundInfo>(*std::move(info)) : std::nullopt;
  return last_;
}

bool RoundState::CheckChanged() {
  if (ended_.load(std::memory_order_acquire)) return true;
  std::optional<RoundInfo> info = channel_->Read();
  if (!info.has_value()) return false;
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    changed = info->seq != seq_ && (!info->running || info->round > round_);
  }
  if (!changed) return false;
  End(generation(),
      absl::AbortedError(info->reason.empty()
                             ? std::string(info->running
                                               ? "a newer round is running"
                                               : "the next round is forming")
                             : info->reason));
  return true;
}

void RoundState::End(int64_t generation, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (ended_.load() || generation != generation_.load()) return;
  ended_why_ = std::string(why.message());
  ended_.store(true, std::memory_order_release);
}

absl::Status RoundState::EndedStatus(absl::string_view what,
                                     int64_t formed_round, bool is_group) {
  std::string why;
  {
    absl::MutexLock lock(&mu_);
    why = ended_why_;
  }
  // The agent's reason, when it has written one, says more than our own
  // failure ("node host-b (ranks 4..5) lost").
  std::optional<RoundInfo> info = channel_->Read();
  if (info.has_value() && !info->reason.empty() &&
      info->round >= formed_round &&
      (!info->running || info->round > formed_round)) {
    why = info->reason;
  }
  const std::string round =
      formed_round >= 0 ? absl::StrCat("round ", formed_round) : "the round";
  if (is_group) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": this group was made in ", round, ", which ended",
                     why.empty() ? "" : absl::StrCat(" (", why, ")"),
                     "; make the group again with NewGroup() after Recover()"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", round, " ended",
                   why.empty() ? "" : absl::StrCat(" (", why, ")"),
                   "; call Recover() to join the next round"));
}

void RoundState::Formed(int64_t seq, int64_t round) {
  absl::MutexLock lock(&mu_);
  seq_ = seq;
  round_ = round;
  ended_why_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
  ended_.store(false, std::memory_order_release);
}

}  // namespace muster::comm::internal
