// Grouping of ranks by their stacks, for `muster stacks` and the hang report:
// ranks whose main threads have identical stacks form one group, largest
// first; a small group that differs from the rest is marked as an odd one out
// (the rank stuck in its data loader while the others wait in allreduce).
// Pure functions, no I/O.
#ifndef MUSTER_RENDEZVOUS_STACK_GROUPS_H_
#define MUSTER_RENDEZVOUS_STACK_GROUPS_H_

#include <string>
#include <vector>

#include "muster/v1/rendezvous.pb.h"
#include "nlohmann/json.hpp"

namespace muster::rendezvous {

struct StackGroup {
  std::vector<int> ranks;  // ascending
  // The main thread's function names, innermost first (empty when the
  // stacks could not be read: then `error` says why).
  std::vector<std::string> frames;
  std::string kind;   // "native" or "python"
  std::string error;  // why these ranks' stacks could not be read
  // A small group (at most a quarter of the ranks) smaller than the largest:
  // where to look first.
  bool odd_one_out = false;
  // Indexes into the input of the ranks in this group.
  std::vector<int> members;
};

// Groups `ranks` (one RankStacks per worker, any order). Ties in size go to
// the group with the lowest rank first.
std::vector<StackGroup> GroupStacks(const std::vector<v1::RankStacks>& ranks);

// "0-2,5" for {0, 1, 2, 5}.
std::string RankRanges(const std::vector<int>& ranks);

// The text for people: one block per group, frames innermost first, the odd
// ones out marked, then the agents that did not answer.
std::string FormatStackGroups(const std::string& job,
                              const std::vector<v1::RankStacks>& ranks,
                              const std::vector<std::string>& missing);

// {"job": J, "groups": [{"ranks": [...], "frames": [...], "kind": ...,
//  "odd_one_out": bool, "error": ..., "other_threads": [{"rank", "tid",
//  "name", "frames"}...]}, ...], "missing": [...]}.
nlohmann::json StackGroupsJson(const std::string& job,
                               const std::vector<v1::RankStacks>& ranks,
                               const std::vector<std::string>& missing);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_STACK_GROUPS_H_
