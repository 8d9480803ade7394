// --health-port: the agent's own /healthz, /readyz and /metrics, served from a
// snapshot of its loop's state (the loop publishes; the HTTP threads read).
#ifndef MUSTER_AGENT_SRC_AGENT_HEALTH_H_
#define MUSTER_AGENT_SRC_AGENT_HEALTH_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "muster/common/http_server.h"

namespace muster::agent {

// Thread-safe.
class AgentHealth {
 public:
  // What the probes see, copied from the loop's state.
  struct Snapshot {
    const char* state = "JOINING";
    int64_t round = 0;
    int restart_count = 0;
    int group_rank = -1;
    int world_size = 0;
    int workers_running = 0;
  };

  // Serves on 0.0.0.0:`port` (0 picks one). Errors: those of HttpServer::Start
  // (a taken port).
  static absl::StatusOr<std::unique_ptr<AgentHealth>> Start(int port,
                                                            std::string run_id);

  void Publish(const Snapshot& snapshot);
  int port() const { return server_->port(); }

 private:
  explicit AgentHealth(std::string run_id) : run_id_(std::move(run_id)) {}
  HttpResponse Ready();
  HttpResponse Metrics();

  const std::string run_id_;
  absl::Mutex mu_;
  Snapshot snapshot_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<HttpServer> server_;  // last: stops before the rest goes
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_AGENT_HEALTH_H_
