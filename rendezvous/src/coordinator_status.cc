// The status view (`muster status`) and the counters for metrics
// (coordinator_internal.h lists the other parts).
#include <algorithm>
#include <string>
#include <vector>

#include "rendezvous/src/coordinator_internal.h"

namespace muster::rendezvous {

v1::GetStatusResponse Coordinator::Impl::Status(
    absl::string_view job_id) const {
  absl::MutexLock lock(&mu_);
  v1::GetStatusResponse out;
  for (const auto& [id, job] : jobs_) {
    if (!job_id.empty() && id != job_id) continue;
    if (job.state == JobState::kOpen && job.nodes.empty()) continue;  // Gone.
    v1::JobStatus* s = out.add_jobs();
    s->set_job_id(id);
    s->set_state(std::string(JobStateName(job.state)));
    s->set_round(job.round);
    s->set_min_nodes(job.min_nodes);
    s->set_max_nodes(job.max_nodes);
    s->set_restart_count(job.restart_count);
    s->set_max_restarts(job.max_restarts);
    s->set_last_failure(job.last_failure);
    for (const Member& m : job.members) {
      v1::Peer* p = s->add_members();
      p->set_node_id(m.rank.node_id);
      p->set_hostname(m.hostname);
      p->set_advertised_addr(m.advertised_addr);
      p->set_group_rank(m.rank.group_rank);
      p->set_local_world_size(m.rank.local_world_size);
      p->set_rank_offset(m.rank.rank_offset);
    }
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
  }
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
