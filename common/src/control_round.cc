#include "muster/common/control_round.h"

#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace muster::common {
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

}  // namespace

std::string FormatControlRound(const ControlRound& info) {
  Json j = {
      {"version", 1},
      {"seq", info.seq},
      {"state", info.running ? "running" : "changing"},
      {"round", info.round},
      {"rank", info.rank},
      {"world_size", info.world_size},
      {"local_rank", info.local_rank},
      {"local_world_size", info.local_world_size},
      {"group_rank", info.group_rank},
      {"group_world_size", info.group_world_size},
      {"role_rank", info.role_rank},
      {"role_world_size", info.role_world_size},
      {"master_addr", info.master_addr},
      {"master_port", info.master_port},
      {"store_endpoint", info.store_endpoint},
      {"store_prefix", info.store_prefix},
      {"restart_count", info.restart_count},
  };
  if (!info.store_token.empty()) j["store_token"] = info.store_token;
  if (!info.reason.empty()) j["reason"] = info.reason;
  std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  text.push_back('\n');
  return text;
}

absl::StatusOr<ControlRound> ParseControlRound(absl::string_view text) {
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
  ControlRound info;
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
  MUSTER_FIELD("role_rank", false, &info.role_rank);
  MUSTER_FIELD("role_world_size", false, &info.role_world_size);
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

std::string FormatControlHello(int64_t pid, absl::string_view library) {
  return Json{{"version", 1}, {"pid", pid}, {"library", std::string(library)}}
      .dump();
}

std::optional<int64_t> ParseControlHelloPid(absl::string_view text) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto version = j.find("version");
  auto pid = j.find("pid");
  if (version == j.end() || !version->is_number_integer() || *version != 1 ||
      pid == j.end() || !pid->is_number_integer()) {
    return std::nullopt;
  }
  return pid->get<int64_t>();
}

}  // namespace muster::common
