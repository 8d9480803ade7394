#include "comm/src/environment.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "muster/common/status.h"

namespace muster::comm::internal {

absl::Status MissingVariable(absl::string_view name, absl::string_view how) {
  return absl::FailedPreconditionError(absl::StrCat(
      "environment variable ", name, " is not set: ", how,
      "; run the program under muster (for example `muster "
      "--nproc-per-node=2 PROGRAM`), or call Communicator::Create with a "
      "store"));
}

absl::StatusOr<std::string> RequiredString(const char* name,
                                           absl::string_view how) {
  const char* value = GetEnv(name);
  if (value == nullptr) return MissingVariable(name, how);
  return std::string(value);
}

absl::StatusOr<int> RequiredInt(const char* name, absl::string_view how) {
  const char* value = GetEnv(name);
  if (value == nullptr) return MissingVariable(name, how);
  int result = 0;
  if (!absl::SimpleAtoi(value, &result)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, "='", value, "' is not an integer"));
  }
  return result;
}

bool EnvironmentSaysAllLocal(int world_size) {
  const char* local = GetEnv("LOCAL_WORLD_SIZE");
  const char* world = GetEnv("WORLD_SIZE");
  int local_size = 0;
  int env_world = 0;
  return local != nullptr && world != nullptr &&
         absl::SimpleAtoi(local, &local_size) &&
         absl::SimpleAtoi(world, &env_world) && env_world == world_size &&
         local_size == world_size;
}

absl::Status ResolveRankAndSize(int& rank, int& world_size) {
  constexpr char kInitHow[] =
      "Communicator::Init needs the rank and the world size, as arguments or "
      "as RANK and WORLD_SIZE";
  if (rank < 0) {
    MUSTER_ASSIGN_OR_RETURN(rank, RequiredInt("RANK", kInitHow));
  }
  if (world_size < 0) {
    MUSTER_ASSIGN_OR_RETURN(world_size, RequiredInt("WORLD_SIZE", kInitHow));
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("Communicator::Init: rank ",
                                                   rank, " is outside [0, ",
                                                   world_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace muster::comm::internal
