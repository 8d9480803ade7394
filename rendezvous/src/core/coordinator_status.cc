// The status view (`muster status`, paged) and the counters for metrics
// (coordinator_internal.h lists the other parts).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rendezvous/src/core/coordinator_internal.h"
#include "rendezvous/src/core/status_page.h"

namespace muster::rendezvous {
namespace {

// Whether GetStatus lists the job: an OPEN job with no agent is gone.
bool Listed(const Job& job) {
  return !(job.state == JobState::kOpen && job.nodes.empty());
}

// `history`: with the job's rounds (asked for one job only: a listing of
// thousands stays small).
// `store_usage`: CoordinatorOptions::store_usage, for one job's answer.
void FillJobStatus(const Job& job, v1::JobStatus* s, absl::Time now,
                   bool history = false,
                   const CoordinatorOptions* options = nullptr) {
  if (history) {
    for (const v1::RoundRecord& r : job.history) *s->add_history() = r;
    if (job.first_failure.has_value())
      *s->mutable_first_failure() = *job.first_failure;
    if (options != nullptr && options->store_usage && job.round > 0 &&
        !job.ended()) {
      v1::StoreUsage* store = s->mutable_store();
      store->set_prefix(StorePrefix(job.id, job.round));
      options->store_usage(store->prefix(), store);
    }
  }
  s->set_job_id(job.id);
  s->set_state(std::string(JobStateName(job.state)));
  s->set_round(job.round);
  s->set_min_nodes(job.min_nodes);
  s->set_max_nodes(job.max_nodes);
  s->set_restart_count(job.restart_count);
  s->set_max_restarts(job.max_restarts);
  s->set_last_failure(job.last_failure);
  for (const Member& m : job.members) FillPeer(m, s->add_members());
  std::vector<const Node*> waiting;
  for (const auto& [nid, node] : job.nodes) {
    if (node.status == NodeStatus::kWaiting) waiting.push_back(&node);
  }
  std::sort(waiting.begin(), waiting.end(), [](const Node* a, const Node* b) {
    return a->join_seq < b->join_seq;
  });
  for (const Node* node : waiting) {
    v1::Peer* p = s->add_waiting();
    p->set_node_id(node->join.node_id());
    p->set_hostname(node->join.hostname());
    p->set_advertised_addr(node->join.advertised_addr());
    p->set_group_rank(-1);  // not assigned until a round forms
    p->set_local_world_size(node->join.local_world_size());
    p->set_rank_offset(-1);
  }
  FillStragglerStatus(job, s, history, now);
}

// Drops the last peers of `peers` until at most `*excess` bytes are gone or
// none is left; returns how many it dropped and lowers *excess.
int DropLast(google::protobuf::RepeatedPtrField<v1::Peer>* peers,
             int64_t* excess) {
  int drop = 0;
  for (int i = peers->size() - 1; i >= 0 && *excess > 0; --i, ++drop) {
    *excess -= static_cast<int64_t>((*peers)[i].ByteSizeLong()) + 3;
  }
  peers->DeleteSubrange(peers->size() - drop, drop);
  return drop;
}

// A job alone larger than max_bytes (many thousand nodes) keeps its first
// members and waiting agents; the others are counted, not listed.
void TrimToBytes(v1::JobStatus* s, int64_t max_bytes) {
  int64_t excess = static_cast<int64_t>(s->ByteSizeLong()) - max_bytes;
  if (excess <= 0) return;
  s->set_waiting_omitted(DropLast(s->mutable_waiting(), &excess));
  s->set_members_omitted(DropLast(s->mutable_members(), &excess));
}

}  // namespace

void FillPeer(const Member& m, v1::Peer* p) {
  p->set_node_id(m.rank.node_id);
  p->set_hostname(m.hostname);
  p->set_advertised_addr(m.advertised_addr);
  p->set_group_rank(m.rank.group_rank);
  p->set_local_world_size(m.rank.local_world_size);
  p->set_rank_offset(m.rank.rank_offset);
}

v1::GetStatusResponse Coordinator::Impl::Status(
    absl::string_view job_id) const {
  absl::MutexLock lock(&mu_);
  v1::GetStatusResponse out;
  for (const auto& [id, job] : jobs_) {
    if (!job_id.empty() && id != job_id) continue;
    if (Listed(job)) {
      FillJobStatus(job, out.add_jobs(), clock_->Now(), !job_id.empty(),
                    &options_);
    }
  }
  return out;
}

v1::GetStatusResponse Coordinator::Impl::StatusPage(
    const StatusPageQuery& query) const {
  absl::MutexLock lock(&mu_);
  v1::GetStatusResponse out;
  int64_t total = 0;
  int64_t bytes = 0;
  bool full = false;  // the page is closed; later visible jobs are "more"
  for (const auto& [id, job] : jobs_) {
    if (!query.job_id.empty() && id != query.job_id) continue;
    // Counted after the filter: a caller learns nothing of the jobs it may
    // not see, not even how many there are.
    if (!Listed(job) || (query.visible && !query.visible(id))) continue;
    ++total;
    if (id <= query.after) continue;
    if (full) {
      if (out.next_page_token().empty()) {
        out.set_next_page_token(
            StatusPageTokenAfter(out.jobs().rbegin()->job_id()));
      }
      continue;
    }
    v1::JobStatus s;
    FillJobStatus(job, &s, clock_->Now(), !query.job_id.empty(), &options_);
    if (out.jobs_size() == 0) TrimToBytes(&s, query.max_bytes);
    const int64_t size = static_cast<int64_t>(s.ByteSizeLong()) + 5;
    if (out.jobs_size() > 0 && bytes + size > query.max_bytes) {
      full = true;  // this job opens the next page
      out.set_next_page_token(
          StatusPageTokenAfter(out.jobs().rbegin()->job_id()));
      continue;
    }
    bytes += size;
    *out.add_jobs() = std::move(s);
    full = out.jobs_size() >= query.page_size;
  }
  out.set_total_jobs(total);
  return out;
}

int64_t Coordinator::Impl::ConnectedAgents() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(conns_.size());
}

int64_t Coordinator::Impl::JobCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(jobs_.size());
}

}  // namespace muster::rendezvous
