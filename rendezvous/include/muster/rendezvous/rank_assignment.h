// Rank assignment for one round: a pure function, so every rule has a unit
// test.
#ifndef MUSTER_RENDEZVOUS_RANK_ASSIGNMENT_H_
#define MUSTER_RENDEZVOUS_RANK_ASSIGNMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace muster::rendezvous {

struct MemberSpec {
  std::string node_id;
  int local_world_size = 1;
  // Wanted group rank (static mode's --node-rank), or -1.
  int node_rank_hint = -1;
  // Order of arrival in the open round; lower joined earlier.
  int64_t join_seq = 0;
};

// The largest world size a round may have (4,194,304 ranks: past every
// machine built so far, far below int32 overflow). Joins that could exceed it
// are refused; AssignRanks checks the sum again in 64 bits.
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 22;
// The most workers one node may run (the launcher caps --nproc-per-node too).
inline constexpr int32_t kMaxLocalWorldSize = 4096;

struct RankAssignment {
  std::string node_id;
  int group_rank = 0;
  int rank_offset = 0;  // global rank of this node's LOCAL_RANK 0
  int local_world_size = 1;
};

// Orders members: hinted nodes at their hinted group rank; the others fill the
// remaining places, first the survivors in their order in `previous_order`
// (node ids of the last round by group rank), then newcomers by join_seq.
// Offsets are prefix sums of local_world_size. Returns the assignments sorted
// by group rank. Errors: INVALID_ARGUMENT when two members hint the same rank,
// or a hint is outside [0, members.size()), naming the nodes and the hint, and
// the fix (distinct --node-rank values 0..N-1); when a node id repeats; when
// members is empty.
absl::StatusOr<std::vector<RankAssignment>> AssignRanks(
    const std::vector<std::string>& previous_order,
    const std::vector<MemberSpec>& members);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_RANK_ASSIGNMENT_H_
