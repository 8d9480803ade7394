#include "agent/src/agent_health.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace muster::agent {

absl::StatusOr<std::unique_ptr<AgentHealth>> AgentHealth::Start(
    int port, std::string run_id) {
  std::unique_ptr<AgentHealth> health(new AgentHealth(std::move(run_id)));
  AgentHealth* h = health.get();
  auto server = HttpServer::Start(
      absl::StrCat("0.0.0.0:", port),
      {{"/healthz",
        [](const HttpRequest&) {
          return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
        }},
       {"/readyz", [h](const HttpRequest&) { return h->Ready(); }},
       {"/metrics", [h](const HttpRequest&) { return h->Metrics(); }}});
  if (!server.ok()) return server.status();
  health->server_ = *std::move(server);
  return health;
}

void AgentHealth::Publish(const Snapshot& snapshot) {
  absl::MutexLock lock(&mu_);
  snapshot_ = snapshot;
}

HttpResponse AgentHealth::Ready() {
  absl::MutexLock lock(&mu_);
  // Ready means this node's workers are running in a formed round.
  bool ready = snapshot_.workers_running > 0;
  return HttpResponse{
      ready ? 200 : 503, "text/plain; charset=utf-8",
      absl::StrCat(snapshot_.state, " round ", snapshot_.round, "\n")};
}

HttpResponse AgentHealth::Metrics() {
  absl::MutexLock lock(&mu_);
  const std::string job =
      absl::StrCat("job=\"", PrometheusLabel(run_id_), "\"");
  std::string body;
  auto gauge = [&](const char* name, const char* help, double value,
                   const std::string& labels) {
    absl::StrAppend(&body, "# HELP ", name, " ", help, "\n# TYPE ", name,
                    " gauge\n", name, "{", labels, "} ", value, "\n");
  };
  gauge("muster_agent_round", "The round this node is in (0 before the first).",
        static_cast<double>(snapshot_.round), job);
  gauge("muster_agent_restarts", "Worker-failure restarts the job has taken.",
        snapshot_.restart_count, job);
  gauge("muster_agent_group_rank",
        "This node's group rank (-1 before the first round).",
        snapshot_.group_rank, job);
  gauge("muster_agent_world_size", "WORLD_SIZE of the current round.",
        snapshot_.world_size, job);
  gauge("muster_agent_workers_running", "Workers of this node running now.",
        snapshot_.workers_running, job);
  gauge("muster_agent_state", "1 for the agent's current state.", 1,
        absl::StrCat(job, ",state=\"", snapshot_.state, "\""));
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", body};
}

}  // namespace muster::agent
