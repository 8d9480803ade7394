// The one codec of the control channel's files (v1; the contract is
// docs/architecture.md, "Control channel"): `round`, which the agent writes,
// and `hello`, which the worker's library writes. The agent's writer and
// libmuster_comm's reader both call it; tests/testdata/control/*.golden are
// its bytes, which the C++ tests (tests/common/control_round_test.cc) and the
// Python tests (tests/python/control_test.py) both check.
#ifndef MUSTER_COMMON_CONTROL_ROUND_H_
#define MUSTER_COMMON_CONTROL_ROUND_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muster::common {

// The contents of `round`: the worker's round ("running") or that the round
// named ended and the next one is forming ("changing", reason says why).
struct ControlRound {
  int64_t seq = -1;
  bool running = false;  // state "running"; false: "changing"
  int64_t round = -1;
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;
  int local_world_size = 0;
  int group_rank = -1;
  int group_world_size = 0;
  int role_rank = -1;
  int role_world_size = 0;
  std::string master_addr;
  int master_port = 0;
  std::string store_endpoint;
  std::string store_prefix;
  std::string store_token;  // A secret: never logged or put in a message.
  int restart_count = 0;
  std::string reason;  // empty: none

  bool operator==(const ControlRound&) const = default;
};

// The bytes of `round` for `info`: one line of JSON (keys sorted), then a
// newline. store_token and reason are left out when empty.
std::string FormatControlRound(const ControlRound& info);

// Parses `round`. Unknown fields are ignored. Errors: INVALID_ARGUMENT naming
// what is wrong (not JSON, a version other than 1, a missing or mistyped
// field, a rank outside the world). The message never contains the token.
absl::StatusOr<ControlRound> ParseControlRound(absl::string_view text);

// The bytes of `hello`: {"library":L,"pid":P,"version":1} (no newline).
std::string FormatControlHello(int64_t pid, absl::string_view library);

// The pid that `hello` names; nullopt unless it is a JSON object with version
// 1 and an integer pid.
std::optional<int64_t> ParseControlHelloPid(absl::string_view text);

}  // namespace muster::common

#endif  // MUSTER_COMMON_CONTROL_ROUND_H_
