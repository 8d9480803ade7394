#include "muster/rendezvous/rank_assignment.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace muster::rendezvous {

absl::StatusOr<std::vector<RankAssignment>> AssignRanks(
    const std::vector<std::string>& previous_order,
    const std::vector<MemberSpec>& members) {
  if (members.empty()) {
    return absl::InvalidArgumentError(
        "cannot assign ranks: the round has no members");
  }
  const int n = static_cast<int>(members.size());

  // Validate identities and sizes first, so a hint error never hides a worse
  // problem.
  absl::flat_hash_map<std::string, int> index_of;
  for (int i = 0; i < n; ++i) {
    const MemberSpec& m = members[i];
    if (m.node_id.empty()) {
      return absl::InvalidArgumentError(
          "cannot assign ranks: a member has an empty node_id; every agent "
          "needs a node id");
    }
    if (!index_of.emplace(m.node_id, i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot assign ranks: node id '", m.node_id,
                       "' appears twice among the round's members; every agent "
                       "of a job needs its own node "
                       "id"));
    }
    if (m.local_world_size < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot assign ranks: node '", m.node_id, "' has local_world_size ",
          m.local_world_size,
          "; it must run at least one worker (--nproc-per-node >= 1)"));
    }
  }

  // Hinted nodes take their places first (static mode's --node-rank wins over
  // every other rule).
  std::vector<int> member_at(n, -1);  // group rank -> index into members
  for (int i = 0; i < n; ++i) {
    const MemberSpec& m = members[i];
    if (m.node_rank_hint == -1) continue;
    if (m.node_rank_hint < 0 || m.node_rank_hint >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", m.node_id, "' asks for group rank ", m.node_rank_hint,
          " (--node-rank=", m.node_rank_hint, ") but the round has ", n,
          " nodes; give the nodes distinct --node-rank "
          "values 0..",
          n - 1));
    }
    int& slot = member_at[m.node_rank_hint];
    if (slot != -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nodes '", members[slot].node_id, "' and '", m.node_id,
          "' both ask for group rank ", m.node_rank_hint,
          " (--node-rank=", m.node_rank_hint,
          "); give the nodes distinct --node-rank values 0..", n - 1));
    }
    slot = i;
  }

  // The rest, in order: survivors by their previous group rank, then newcomers
  // by arrival. The input index breaks join_seq ties so the result never
  // depends on sort stability.
  absl::flat_hash_map<std::string, int> previous_rank;
  for (size_t r = 0; r < previous_order.size(); ++r) {
    previous_rank.emplace(previous_order[r], static_cast<int>(r));
  }
  auto key = [&](int i) {
    auto it = previous_rank.find(members[i].node_id);
    const int prev = it == previous_rank.end() ? std::numeric_limits<int>::max()
                                               : it->second;
    return std::make_tuple(prev, members[i].join_seq, i);
  };
  std::vector<int> rest;
  for (int i = 0; i < n; ++i) {
    if (members[i].node_rank_hint == -1) rest.push_back(i);
  }
  std::sort(rest.begin(), rest.end(),
            [&](int a, int b) { return key(a) < key(b); });
  auto next = rest.begin();
  for (int r = 0; r < n; ++r) {
    if (member_at[r] == -1) member_at[r] = *next++;
  }

  int64_t total = 0;
  for (const MemberSpec& m : members) total += m.local_world_size;
  if (total > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot assign ranks: the round's ", n, " nodes run ", total,
        " workers in all, above the limit of ", kMaxWorldSize,
        "; run fewer workers per node or fewer nodes"));
  }
  std::vector<RankAssignment> out;
  out.reserve(n);
  int offset = 0;
  for (int r = 0; r < n; ++r) {
    const MemberSpec& m = members[member_at[r]];
    out.push_back(RankAssignment{.node_id = m.node_id,
                                 .group_rank = r,
                                 .rank_offset = offset,
                                 .local_world_size = m.local_world_size});
    offset += m.local_world_size;
  }
  return out;
}

}  // namespace muster::rendezvous
