#include "rendezvous/src/core/straggler_tracker.h"

#include <algorithm>
#include <utility>

namespace muster::rendezvous {
namespace {

// Fewer collectives than this in the window say too little to score.
constexpr uint64_t kMinCollectives = 3;
// A rank that computes (next to) nothing between collectives is measured as
// this much, so that the ratios stay finite.
constexpr double kFloorUs = 1;

}  // namespace

void StragglerTracker::StartRound(int64_t round) {
  if (round == round_) return;
  round_ = round;
  ranks_.clear();
  scores_.clear();
}

void StragglerTracker::Add(int rank, const std::string& node_id,
                           const std::string& hostname, uint64_t collectives,
                           uint64_t compute_us, absl::Time at) {
  Rank& r = ranks_[rank];
  if (r.node_id != node_id) {
    // Another node holds the rank now (or the first sample): start over.
    r = Rank{node_id, hostname, {}};
  }
  if (!r.samples.empty()) {
    const Sample& last = r.samples.back();
    // Counters that went back belong to a new process: start over.
    if (collectives < last.collectives || compute_us < last.compute_us) {
      r.samples.clear();
    } else if (collectives == last.collectives) {
      return;  // nothing new (a heartbeat between two collectives)
    }
  }
  r.samples.push_back(Sample{at, collectives, compute_us});
}

std::vector<StragglerChange> StragglerTracker::Evaluate(absl::Time now) {
  const absl::Time start = now - policy_.window;
  // Compute time per collective over the window, by rank.
  std::map<int, double> per;
  for (auto& [rank, r] : ranks_) {
    // Keep the newest sample at or before the window's start as the base.
    while (r.samples.size() > 2 && r.samples[1].at <= start) {
      r.samples.pop_front();
    }
    if (r.samples.size() < 2 || r.samples.back().at < start) continue;
    const Sample& a = r.samples.front();
    const Sample& b = r.samples.back();
    if (b.collectives - a.collectives < kMinCollectives ||
        b.at - a.at < policy_.window / 4) {
      continue;
    }
    per[rank] =
        std::max(kFloorUs, static_cast<double>(b.compute_us - a.compute_us)) /
        static_cast<double>(b.collectives - a.collectives);
  }
  std::vector<StragglerChange> changes;
  if (per.size() < 2) {
    // Nothing to compare: whoever was a straggler is no longer known as one.
    for (auto& [rank, s] : scores_) {
      if (s.straggler) changes.push_back({s, false});
    }
    scores_.clear();
    return changes;
  }
  std::vector<double> values;
  values.reserve(per.size());
  for (const auto& [rank, v] : per) values.push_back(v);
  std::nth_element(values.begin(), values.begin() + values.size() / 2,
                   values.end());
  double median = values[values.size() / 2];
  if (values.size() % 2 == 0) {
    // The lower middle of an even count: with two ranks, the faster one.
    median =
        *std::max_element(values.begin(), values.begin() + values.size() / 2);
  }
  const double recover = std::min(1.0, policy_.threshold + 0.1);
  std::map<int, RankScore> next;
  for (const auto& [rank, v] : per) {
    const Rank& r = ranks_[rank];
    RankScore s;
    s.rank = rank;
    s.node_id = r.node_id;
    s.hostname = r.hostname;
    s.score = std::min(1.0, median / v);
    auto old = scores_.find(rank);
    const bool was = old != scores_.end() && old->second.straggler;
    s.straggler = was ? s.score < recover : s.score < policy_.threshold;
    s.since = was ? old->second.since : now;
    if (s.straggler != was) changes.push_back({s, s.straggler});
    next.emplace(rank, std::move(s));
  }
  // Stragglers no longer scored (their node left, or its samples went stale).
  for (auto& [rank, s] : scores_) {
    if (s.straggler && !next.contains(rank)) changes.push_back({s, false});
  }
  scores_ = std::move(next);
  return changes;
}

std::vector<RankScore> StragglerTracker::Stragglers() const {
  std::vector<RankScore> out;
  for (const auto& [rank, s] : scores_) {
    if (s.straggler) out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const RankScore& a, const RankScore& b) {
    return a.score < b.score;
  });
  return out;
}

}  // namespace muster::rendezvous
