// StragglerTracker: each rank's speed score in one job's running round, from
// the speed counters its agent's heartbeats carry (Heartbeat.speeds, read from
// the workers' progress files), and which ranks are stragglers.
//
// Why this measure: in a job whose ranks run the same collectives, every rank
// leaves a collective together, so step time is the same everywhere and says
// nothing. What differs is where the time goes: the slow rank computes longer
// between collectives and the others wait for it inside them. A rank's compute
// time per collective over the window, against the job's median rank, is its
// speed: score = median / own, capped at 1 (1: as fast as the median, 0.5:
// half as fast). It needs no change to a worker and no clock shared across
// machines: every figure is a difference of one process's own counters.
//
// A rank becomes a straggler when its score is under the threshold and stops
// being one once it is back at threshold + 0.1 (capped at 1): a score near the
// threshold does not flap. Pure: no lock, no I/O, the time is given.
#ifndef MUSTER_RENDEZVOUS_SRC_STRAGGLER_TRACKER_H_
#define MUSTER_RENDEZVOUS_SRC_STRAGGLER_TRACKER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace muster::rendezvous {

struct StragglerPolicy {
  double threshold = 0.7;
  absl::Duration window = absl::Seconds(20);
};

// One rank's score as of the last Evaluate.
struct RankScore {
  int rank = 0;
  std::string node_id;
  std::string hostname;
  double score = 1;
  bool straggler = false;
  absl::Time since = absl::InfinitePast();  // when it became one
};

// A change Evaluate saw: `rank` became (or stopped being) a straggler.
struct StragglerChange {
  RankScore rank;
  bool became = false;
};

class StragglerTracker {
 public:
  explicit StragglerTracker(StragglerPolicy policy) : policy_(policy) {}

  // Forgets everything when `round` differs from the round it tracks (ranks
  // are renumbered between rounds).
  void StartRound(int64_t round);
  int64_t round() const { return round_; }

  // A sample of rank `rank`'s cumulative counters, received at `at`.
  void Add(int rank, const std::string& node_id, const std::string& hostname,
           uint64_t collectives, uint64_t compute_us, absl::Time at);

  // Recomputes every score over the window ending at `now`; returns the
  // ranks that became or stopped being stragglers.
  std::vector<StragglerChange> Evaluate(absl::Time now);

  // The scores of the last Evaluate (ranks not scored yet are absent),
  // by rank.
  const std::map<int, RankScore>& scores() const { return scores_; }
  // The stragglers of the last Evaluate, slowest first.
  std::vector<RankScore> Stragglers() const;

  const StragglerPolicy& policy() const { return policy_; }

 private:
  struct Sample {
    absl::Time at;
    uint64_t collectives = 0;
    uint64_t compute_us = 0;
  };
  struct Rank {
    std::string node_id;
    std::string hostname;
    std::deque<Sample> samples;  // oldest first
  };

  const StragglerPolicy policy_;
  int64_t round_ = -1;
  std::map<int, Rank> ranks_;
  std::map<int, RankScore> scores_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_STRAGGLER_TRACKER_H_
