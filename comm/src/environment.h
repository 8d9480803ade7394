// The environment variables of libmuster_comm's factories (the launcher's
// contract: RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_*, MUSTER_STORE_*):
// reading them with messages that name the variable and the fix.
#ifndef MUSTER_COMM_SRC_ENVIRONMENT_H_
#define MUSTER_COMM_SRC_ENVIRONMENT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "muster/platform/env.h"

namespace muster::comm::internal {

// The value of environment variable `name`, or nullptr when unset or empty
// (platform's reader, under the name comm's code uses).
inline const char* GetEnv(const char* name) {
  return platform::NonEmptyEnv(name);
}

// FAILED_PRECONDITION: `name` is not set; `how` says what needed it.
absl::Status MissingVariable(absl::string_view name, absl::string_view how);

// The value of `name`; FAILED_PRECONDITION (MissingVariable) when unset.
absl::StatusOr<std::string> RequiredString(const char* name,
                                           absl::string_view how);
// The integer value of `name`; FAILED_PRECONDITION when unset,
// INVALID_ARGUMENT when not an integer.
absl::StatusOr<int> RequiredInt(const char* name, absl::string_view how);

// Whether the launcher says every rank of a `world_size` job runs on this
// node (LOCAL_WORLD_SIZE == WORLD_SIZE == world_size).
bool EnvironmentSaysAllLocal(int world_size);

// Fills a rank or world size given as -1 from RANK / WORLD_SIZE and checks
// 0 <= rank < world_size. Errors: FAILED_PRECONDITION (a variable needed is
// not set), INVALID_ARGUMENT (out of range).
absl::Status ResolveRankAndSize(int& rank, int& world_size);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_ENVIRONMENT_H_
