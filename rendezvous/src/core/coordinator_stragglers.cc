// The straggler watch: each agent's heartbeats carry its workers' speed
// counters (Heartbeat.speeds); once a second musterd feeds a running job's
// to its StragglerTracker (straggler_tracker.h: the score and why it is
// computed so), logs every rank that becomes or stops being a straggler, and
// under --straggler-action=replace or exclude takes the slowest node out of
// the job: Excluded to its agent, which stops its workers and exits 5, then
// the round ends as for a lost node. In place the other nodes keep their
// workers and a waiting spare takes the place. An excluded node's Joins are
// answered with Excluded until the job's exclude cooldown has passed
// (docs/architecture.md, "Stragglers").
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "muster/common/logging.h"
#include "rendezvous/src/core/coordinator_internal.h"

namespace muster::rendezvous {
namespace {

std::string Score(double score) { return absl::StrFormat("%.2f", score); }

std::string ClockTime(absl::Time t) {
  return absl::FormatTime("%H:%M:%S", t, absl::UTCTimeZone()) + " UTC";
}

}  // namespace

absl::Status ValidateStragglerPolicy(const v1::Join& join) {
  const std::string action = absl::AsciiStrToLower(join.straggler_action());
  if (!action.empty() && action != "report" && action != "replace" &&
      action != "exclude") {
    return absl::InvalidArgumentError(absl::StrCat(
        "straggler_action '", join.straggler_action(),
        "' is not one of report, replace, exclude: give --straggler-action="
        "report (the default), replace or exclude"));
  }
  // !(x >= 0) also refuses NaN.
  if (!(join.straggler_threshold() >= 0) || join.straggler_threshold() >= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "straggler_threshold ", join.straggler_threshold(),
        " is outside (0, 1): give --straggler-threshold between 0 and 1, "
        "e.g. 0.7 (the default)"));
  }
  if (join.straggler_window_ms() < 0 || join.exclude_cooldown_ms() < 0) {
    return absl::InvalidArgumentError(
        "straggler_window_ms and exclude_cooldown_ms must not be negative: "
        "give --straggler-window and --exclude-cooldown as durations, e.g. "
        "20s and 10m");
  }
  return absl::OkStatus();
}

void Coordinator::Impl::TakeStragglerPolicy(Job& job, const v1::Join& join) {
  const std::string action = absl::AsciiStrToLower(join.straggler_action());
  job.straggler_action = action.empty() ? "report" : action;
  if (join.straggler_threshold() > 0) {
    job.straggler_policy.threshold = join.straggler_threshold();
  }
  if (join.straggler_window_ms() > 0) {
    job.straggler_policy.window =
        absl::Milliseconds(join.straggler_window_ms());
  }
  if (join.exclude_cooldown_ms() > 0) {
    job.exclude_cooldown = absl::Milliseconds(join.exclude_cooldown_ms());
  }
  job.exclude_after_failures = std::max(0, join.exclude_after_failures());
  job.stragglers = std::make_shared<StragglerTracker>(job.straggler_policy);
}

absl::Time Coordinator::Impl::CheckStragglers(Job& job, absl::Time now) {
  if (now < job.next_straggler_check) return job.next_straggler_check;
  job.next_straggler_check = now + kStragglerCheckInterval;
  if (job.stragglers == nullptr) {
    job.stragglers = std::make_shared<StragglerTracker>(job.straggler_policy);
  }
  StragglerTracker& tracker = *job.stragglers;
  tracker.StartRound(job.round);
  for (const Member& m : job.members) {
    if (job.succeeded.contains(m.rank.node_id)) continue;
    auto node = job.nodes.find(m.rank.node_id);
    if (node == job.nodes.end()) continue;
    const std::optional<SpeedMark> mark =
        speeds_.Visit(node->second.conn, [](SpeedMark& s) { return s; });
    if (!mark.has_value() || mark->round != job.round) continue;
    for (const v1::RankSpeedSample& s : mark->samples) {
      tracker.Add(s.rank(), m.rank.node_id, m.hostname, s.collectives(),
                  s.compute_us(), mark->at);
    }
  }
  const std::string window = FormatSeconds(job.straggler_policy.window);
  for (const StragglerChange& c : tracker.Evaluate(now)) {
    if (c.became) {
      MUSTER_LOG(WARNING) << "job " << job.id << ": rank " << c.rank.rank
                          << " ("
                          << DescribeNode(c.rank.hostname, c.rank.node_id)
                          << ") is a straggler: speed " << Score(c.rank.score)
                          << " of the median rank over " << window
                          << " (--straggler-threshold "
                          << job.straggler_policy.threshold << ")";
    } else {
      MUSTER_LOG(INFO) << "job " << job.id << ": rank " << c.rank.rank << " ("
                       << DescribeNode(c.rank.hostname, c.rank.node_id)
                       << ") is no longer a straggler (speed "
                       << Score(c.rank.score) << ")";
    }
  }
  if (job.straggler_action == "report" ||
      job.straggler_acted_round == job.round) {
    return job.next_straggler_check;
  }
  const std::vector<RankScore> slow = tracker.Stragglers();
  if (slow.empty()) return job.next_straggler_check;
  const RankScore& worst = slow.front();
  auto node = job.nodes.find(worst.node_id);
  if (node == job.nodes.end() || node->second.status != NodeStatus::kMember) {
    return job.next_straggler_check;
  }
  // replace: a spare must be waiting, and the others must keep their workers
  // (in place); exclude: the job must stay at or above its minimum.
  const bool spare = job.WaitingCount() > 0;
  const bool in_place = node->second.join.recovery_in_place();
  const int left = static_cast<int>(job.members.size()) - 1;
  std::string why_not;
  if (job.straggler_action == "replace") {
    if (!in_place) {
      why_not = "the job does not recover in place (--recovery=in-place)";
    } else if (!spare) {
      why_not = "no spare agent waits for a place";
    }
  } else if (left < job.min_nodes && !spare) {
    why_not = absl::StrCat("the job would fall to ", left,
                           " nodes, under its minimum of ", job.min_nodes);
  }
  if (!why_not.empty()) {
    if (job.straggler_logged_round != job.round) {
      job.straggler_logged_round = job.round;
      MUSTER_LOG(WARNING) << "job " << job.id << ": rank " << worst.rank
                          << " is a straggler, but --straggler-action="
                          << job.straggler_action << " cannot act: " << why_not
                          << "; reporting it only";
    }
    return job.next_straggler_check;
  }
  // At most one straggler excluded a round (an exclusion for failed rounds,
  // made as the next round opens, does not count).
  job.straggler_acted_round = job.round;
  ExcludeNode(job, worst.node_id,
              absl::StrCat("straggler, score ", Score(worst.score), " (rank ",
                           worst.rank, " at ", Score(worst.score),
                           " of the median speed over ", window,
                           "; --straggler-threshold ",
                           job.straggler_policy.threshold, ")"),
              worst.score, now,
              absl::StrCat("--straggler-action=", job.straggler_action));
  return job.next_straggler_check;
}

void Coordinator::Impl::RecordExclusion(Job& job, const Node& node,
                                        const std::string& reason, double score,
                                        absl::Time now, const std::string& by) {
  const std::string& node_id = node.join.node_id();
  const std::string& hostname = node.join.hostname();
  bool shared_host = false;
  for (const auto& [id, other] : job.nodes) {
    shared_host |= id != node_id && other.join.hostname() == hostname;
  }
  job.excluded.push_back(Exclusion{.node_id = node_id,
                                   .hostname = hostname,
                                   .by_host = !shared_host,
                                   .reason = reason,
                                   .score = score,
                                   .since = now,
                                   .until = now + job.exclude_cooldown});
  MUSTER_LOG(WARNING) << "job " << job.id << ": excluding "
                      << DescribeNode(hostname, node_id) << " (" << by
                      << "): " << reason << "; it may rejoin after "
                      << ClockTime(now + job.exclude_cooldown);
}

void Coordinator::Impl::ExcludeNode(Job& job, const std::string& node_id,
                                    const std::string& reason, double score,
                                    absl::Time now, const std::string& by) {
  auto it = job.nodes.find(node_id);
  if (it == job.nodes.end()) return;
  RecordExclusion(job, it->second, reason, score, now, by);
  v1::ServerMessage msg;
  msg.set_epoch(epoch());
  msg.mutable_excluded()->set_round(job.round);
  msg.mutable_excluded()->set_reason(reason);
  msg.mutable_excluded()->set_score(score);
  Send(it->second.conn, std::move(msg));
  LoseNode(job, node_id, absl::StrCat("excluded: ", reason), absl::OkStatus());
}

bool Coordinator::Impl::CountFailedRound(Job& job, const std::string& node_id) {
  // Only the node whose failure ended the round counts; a round another node
  // ended breaks every other streak.
  const int count = job.failed_in_a_row[node_id] + 1;
  job.failed_in_a_row.clear();
  job.failed_in_a_row[node_id] = count;
  if (job.exclude_after_failures <= 0 || count < job.exclude_after_failures) {
    return false;
  }
  const int left = static_cast<int>(job.members.size()) - 1;
  if (left >= job.min_nodes || job.WaitingCount() > 0) return true;
  auto node = job.nodes.find(node_id);
  MUSTER_LOG(WARNING) << "job " << job.id << ": the workers of "
                      << DescribeNode(node == job.nodes.end()
                                          ? std::string()
                                          : node->second.join.hostname(),
                                      node_id)
                      << " failed " << count
                      << " rounds in a row, but excluding it would leave "
                      << left << " nodes, under the minimum of "
                      << job.min_nodes << ", and no spare waits; keeping it";
  return false;
}

bool Coordinator::Impl::AnswerExcludedJoin(
    Job& job, const v1::Join& join, std::shared_ptr<AgentChannel>& channel,
    absl::Time now) {
  job.excluded.erase(
      std::remove_if(job.excluded.begin(), job.excluded.end(),
                     [&](const Exclusion& e) { return e.until <= now; }),
      job.excluded.end());
  for (const Exclusion& e : job.excluded) {
    if (e.node_id != join.node_id() &&
        !(e.by_host && e.hostname == join.hostname())) {
      continue;
    }
    const std::string reason =
        absl::StrCat(e.reason, "; excluded from job ", job.id, " until ",
                     ClockTime(e.until), " (--exclude-cooldown)");
    MUSTER_LOG(WARNING) << "job " << job.id << ": refusing "
                        << DescribeNode(join.hostname(), join.node_id()) << ": "
                        << reason;
    auto msg = std::make_shared<v1::ServerMessage>();
    msg->set_epoch(epoch());
    msg->mutable_excluded()->set_round(job.round);
    msg->mutable_excluded()->set_reason(reason);
    msg->mutable_excluded()->set_score(e.score);
    outbox_.Send(channel, std::move(msg));
    outbox_.Close(std::move(channel), absl::OkStatus());
    return true;
  }
  return false;
}

std::string StragglerNote(const Job& job) {
  if (job.stragglers == nullptr || job.stragglers->round() != job.round) {
    return "";
  }
  std::string note;
  for (const RankScore& r : job.stragglers->Stragglers()) {
    absl::StrAppend(&note, "; rank ", r.rank, " (",
                    DescribeNode(r.hostname, r.node_id),
                    ") was a straggler (speed ", Score(r.score), ")");
  }
  return note;
}

void FillStragglerStatus(const Job& job, v1::JobStatus* s, bool one_job,
                         absl::Time now) {
  s->set_straggler_action(job.straggler_action);
  s->set_straggler_threshold(job.straggler_policy.threshold);
  for (const Exclusion& e : job.excluded) {
    if (e.until <= now) continue;
    v1::ExcludedNode* x = s->add_excluded();
    x->set_node_id(e.node_id);
    x->set_hostname(e.hostname);
    x->set_reason(e.reason);
    x->set_since_unix_ms(absl::ToUnixMillis(e.since));
    x->set_until_unix_ms(absl::ToUnixMillis(e.until));
  }
  if (job.state != JobState::kRunning || job.stragglers == nullptr ||
      job.stragglers->round() != job.round) {
    return;
  }
  for (const RankScore& r : job.stragglers->Stragglers()) {
    v1::Straggler* x = s->add_stragglers();
    x->set_rank(r.rank);
    x->set_node_id(r.node_id);
    x->set_hostname(r.hostname);
    x->set_score(r.score);
    x->set_since(absl::ToUnixMillis(r.since));
  }
  if (!one_job) return;
  for (const auto& [rank, r] : job.stragglers->scores()) {
    v1::RankSpeed* x = s->add_speeds();
    x->set_rank(rank);
    x->set_node_id(r.node_id);
    x->set_score(r.score);
  }
}

}  // namespace muster::rendezvous
