// Parsers of the launcher's structured flag values (node counts, worker
// counts, per-rank stream maps, lists). Each takes the value with its source
// and returns INVALID_ARGUMENT "<source>=<value>: <what is expected>". Pure
// except ParseNproc, which asks `host` for auto|cpu|gpu. Internal to cli/.
#ifndef MUSTER_CLI_LAUNCH_VALUES_H_
#define MUSTER_CLI_LAUNCH_VALUES_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/flag_util.h"
#include "cli/launch_flags.h"

namespace muster::cli {

// The most workers one agent starts. Far above any machine's cores or GPUs,
// and low enough that a typo (an extra digit, INT32_MAX) is refused at once
// instead of fork-bombing the node; a job's world size is capped again by the
// server (kMaxWorldSize in the coordinator).
inline constexpr int kMaxNprocPerNode = 4096;

// --nnodes: "N" or "MIN:MAX", 1 <= MIN <= MAX.
absl::Status ParseNnodes(const Given& g, int* min_nodes, int* max_nodes);

// --nproc-per-node: 1..kMaxNprocPerNode, or "auto", "cpu" or "gpu" (`host` is
// asked only for these words).
absl::StatusOr<int> ParseNproc(const Given& g,
                               const std::function<HostResources()>& host);

// -r / -t: "V" for every local rank (key -1), or "RANK:V,RANK:V", V in 0..3.
// Zero entries are dropped: an empty map means "console only", so the agent
// needs no log directory for it.
absl::StatusOr<std::map<int, int>> ParseStdMap(const Given& g);

// --local-ranks-filter: "0,2".
absl::StatusOr<std::set<int>> ParseRankList(const Given& g);

// torchrun's comma_separated_list: items split at ',', ",," is a literal
// comma, empty items are dropped ("" filters nothing).
std::vector<std::string> ParseFilterList(absl::string_view text);

// --signals-to-handle: names (SIGTERM, TERM, sigterm) or numbers, in the
// order given, without repeats; never SIGKILL or SIGSTOP.
absl::StatusOr<std::vector<int>> ParseSignalList(const Given& g);

}  // namespace muster::cli

#endif  // MUSTER_CLI_LAUNCH_VALUES_H_
