#include "rendezvous/src/service/stacks_relay.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace muster::rendezvous {
namespace {

std::string AgentName(const std::string& hostname, const std::string& node) {
  return absl::StrCat(hostname.empty() ? "?" : hostname, " (node ", node, ")");
}

}  // namespace

StacksRelay::StacksRelay() : timer_([this] { TimerLoop(); }) {}

StacksRelay::~StacksRelay() {
  std::vector<Pending> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, p] : pending_) {
      for (const auto& [conn, name] : p.waiting)
        p.response.add_missing(absl::StrCat(name, ": musterd is stopping"));
      left.push_back(std::move(p));
    }
    pending_.clear();
  }
  timer_.join();
  Finish(std::move(left));
}

void StacksRelay::OnJoined(ConnectionId conn, const v1::Join& join,
                           std::weak_ptr<AgentChannel> channel) {
  absl::MutexLock lock(&mu_);
  agents_[conn] =
      Agent{join.job_id(), join.node_id(), join.hostname(), std::move(channel)};
}

void StacksRelay::OnGone(ConnectionId conn) {
  std::vector<Pending> done;
  {
    absl::MutexLock lock(&mu_);
    agents_.erase(conn);
    for (auto& [id, p] : pending_) {
      auto it = p.waiting.find(conn);
      if (it == p.waiting.end()) continue;
      p.response.add_missing(
          absl::StrCat(it->second, ": its session ended before it answered"));
      p.waiting.erase(it);
    }
    done = TakeCompleteLocked(false);
  }
  Finish(std::move(done));
}

void StacksRelay::OnReport(ConnectionId conn, const v1::StacksReport& report) {
  std::vector<Pending> done;
  {
    absl::MutexLock lock(&mu_);
    auto p = pending_.find(report.request_id());
    if (p == pending_.end()) return;  // too late: already answered
    auto it = p->second.waiting.find(conn);
    if (it == p->second.waiting.end()) return;
    if (!report.error().empty() && report.ranks().empty()) {
      p->second.response.add_missing(
          absl::StrCat(it->second, ": ", report.error()));
    }
    for (const v1::RankStacks& r : report.ranks())
      *p->second.response.add_ranks() = r;
    p->second.waiting.erase(it);
    done = TakeCompleteLocked(false);
  }
  Finish(std::move(done));
}

void StacksRelay::Gather(
    const std::string& job,
    const std::vector<std::pair<std::string, std::string>>& members,
    absl::Duration timeout, Done done) {
  Pending pending;
  pending.response.set_job_id(job);
  pending.deadline = absl::Now() + timeout;
  pending.timeout = timeout;
  pending.done = std::move(done);
  std::vector<std::shared_ptr<AgentChannel>> ask;
  auto msg = std::make_shared<v1::ServerMessage>();
  {
    absl::MutexLock lock(&mu_);
    const int64_t id = next_request_++;
    msg->mutable_capture_stacks()->set_request_id(id);
    // The agent gets most of the time; the rest is for the trip back.
    msg->mutable_capture_stacks()->set_timeout_ms(
        absl::ToInt64Milliseconds(timeout * 8 / 10));
    std::vector<std::string> asked_nodes;
    for (const auto& [conn, agent] : agents_) {
      if (agent.job != job) continue;
      std::shared_ptr<AgentChannel> channel = agent.channel.lock();
      if (channel == nullptr) continue;
      pending.waiting[conn] = AgentName(agent.hostname, agent.node_id);
      asked_nodes.push_back(agent.node_id);
      ask.push_back(std::move(channel));
    }
    for (const auto& [hostname, node] : members) {
      if (std::find(asked_nodes.begin(), asked_nodes.end(), node) ==
          asked_nodes.end()) {
        pending.response.add_missing(
            absl::StrCat(AgentName(hostname, node),
                         ": a member of the round with no session now"));
      }
    }
    if (!pending.waiting.empty()) {
      pending_.emplace(id, std::move(pending));
    }
  }
  if (ask.empty()) {
    Finish([&] {
      std::vector<Pending> v;
      v.push_back(std::move(pending));
      return v;
    }());
    return;
  }
  // Outside the lock: a channel's Send never blocks, but it is not ours to
  // call with a lock held.
  for (const auto& channel : ask) channel->SendShared(msg);
}

std::vector<StacksRelay::Pending> StacksRelay::TakeCompleteLocked(
    bool force_expired) {
  std::vector<Pending> done;
  const absl::Time now = absl::Now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    const bool expired = force_expired && now >= p.deadline;
    if (!p.waiting.empty() && !expired) {
      ++it;
      continue;
    }
    for (const auto& [conn, name] : p.waiting) {
      p.response.add_missing(absl::StrCat(name, ": no answer within ",
                                          absl::FormatDuration(p.timeout)));
    }
    done.push_back(std::move(p));
    pending_.erase(it++);
  }
  return done;
}

void StacksRelay::Finish(std::vector<Pending> done) {
  for (Pending& p : done) {
    // Ranks in order, so that every reader sees them alike.
    auto* ranks = p.response.mutable_ranks();
    std::sort(ranks->begin(), ranks->end(),
              [](const v1::RankStacks& a, const v1::RankStacks& b) {
                return a.global_rank() < b.global_rank();
              });
    if (p.done) p.done(std::move(p.response));
  }
}

void StacksRelay::TimerLoop() {
  for (;;) {
    std::vector<Pending> done;
    {
      absl::MutexLock lock(&mu_);
      absl::Time next = absl::InfiniteFuture();
      for (const auto& [id, p] : pending_) next = std::min(next, p.deadline);
      // Wakes at the earliest deadline; a new request (with a later one or
      // not) is noticed within 100 ms.
      mu_.AwaitWithDeadline(
          absl::Condition(&stopping_),
          std::min(next, absl::Now() + absl::Milliseconds(100)));
      if (stopping_) return;
      done = TakeCompleteLocked(true);
    }
    Finish(std::move(done));
  }
}

}  // namespace muster::rendezvous
