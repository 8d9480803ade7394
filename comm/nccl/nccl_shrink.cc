// The NCCL part of a round re-formed by Recover (api/recover.cc): shrink the
// ended round's communicator when the new round holds exactly its survivors,
// in their order. Built with or without NCCL: it uses the Backend interface
// only (Backend::Shrink, UNIMPLEMENTED without NCCL >= 2.27).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "comm/nccl/nccl_backend.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

// The ranks of the ended round missing from this one, when every rank of
// this round is a survivor in its old order; nullopt otherwise.
// `has_previous`: this rank holds the ended round's NCCL backend.
absl::StatusOr<std::optional<std::vector<int>>> SurvivorsOnly(
    const CoreConfig& config, bool has_previous, absl::Time deadline) {
  // Every rank says where it was: "ROUND:RANK:WORLD" for a survivor holding
  // its old NCCL communicator, "new" otherwise.
  const std::string root = absl::StrCat(config.key_prefix, "nccl_previous/");
  const std::string mine =
      has_previous
          ? absl::StrCat(config.previous_round, ":", config.previous_rank, ":",
                         config.previous_world_size)
          : "new";
  MUSTER_RETURN_IF_ERROR(
      config.store->Set(absl::StrCat(root, config.rank), mine));
  std::vector<std::string> keys;
  for (int r = 0; r < config.world_size; ++r) {
    keys.push_back(absl::StrCat(root, r));
  }
  MUSTER_ASSIGN_OR_RETURN(
      std::vector<std::string> values,
      config.store->MultiGet(
          keys, std::max(deadline - absl::Now(), absl::Milliseconds(1))));
  // ncclCommShrink keeps the survivors in their order, ranks compacted:
  // usable when this round is exactly that.
  std::vector<bool> kept(std::max(config.previous_world_size, 0), false);
  int last = -1;
  for (const std::string& v : values) {
    std::vector<std::string> parts = absl::StrSplit(v, ':');
    int64_t round = 0;
    int rank = 0;
    int world = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &round) ||
        !absl::SimpleAtoi(parts[1], &rank) ||
        !absl::SimpleAtoi(parts[2], &world) || round != config.previous_round ||
        world != config.previous_world_size || rank <= last || rank >= world) {
      return std::optional<std::vector<int>>();
    }
    kept[rank] = true;
    last = rank;
  }
  std::vector<int> excluded;
  for (int r = 0; r < config.previous_world_size; ++r) {
    if (!kept[r]) excluded.push_back(r);
  }
  return std::optional<std::vector<int>>(std::move(excluded));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> ShrinkOrConnectNccl(
    const CoreConfig& config, std::unique_ptr<Backend>& previous,
    absl::Time deadline) {
  if (config.round != nullptr && !config.is_group) {
    MUSTER_ASSIGN_OR_RETURN(
        std::optional<std::vector<int>> excluded,
        SurvivorsOnly(config, previous != nullptr, deadline));
    if (excluded.has_value() && !excluded->empty() && previous != nullptr) {
      const std::string who =
          absl::StrCat("rank ", config.rank, "/", config.world_size);
      std::unique_ptr<Backend> old = std::move(previous);
      absl::StatusOr<std::unique_ptr<Backend>> shrunk =
          old->Shrink(*excluded, config.rank, config.world_size, deadline);
      if (shrunk.ok()) {
        MUSTER_LOG(DEBUG) << who << ": NCCL communicator shrunk from "
                          << config.previous_world_size << " ranks";
        return shrunk;
      }
      // Every rank runs the same library: all of them get here together.
      if (!absl::IsUnimplemented(shrunk.status())) return shrunk.status();
      MUSTER_LOG(DEBUG) << who << ": " << shrunk.status()
                        << ": initialising a new NCCL communicator";
    }
  }
  return ConnectNccl(config, deadline);
}

}  // namespace muster::comm::internal
