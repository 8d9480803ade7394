// ElasticAgent: the per-node agent behind `muster`. It joins the rendezvous
// (embedding the server when the mode asks for it), starts this node's workers
// for each round, reports how they ended, follows Restart / JobSucceeded /
// JobFailed from the server, and turns the outcome into an exit status with a
// failure summary that names the root cause.
//
// Agent states (transitions in ElasticAgent::Run's loop, one place):
//
//   ┌──────────┐ RoundReady ┌─────────┐ all workers exit 0 ┌───────────┐
//   JobSucceeded │ JOINING  │───────────►│ RUNNING │───────────────────►│
//   REPORTED  │──────────────► exit 0 └──────────┘            └─────────┘
//   └───────────┘
//      ▲  ▲                  │  │ a worker failed: stop the rest,  │
//      │  │ Restart          │  │ WorkersFailed                    │ Restart
//      │  └──────────────────┘  ▼                                  │
//      │                    ┌───────────┐                          │
//      └────────────────────│ REPORTED  │◄─────────────────────────┘
//          Restart (rejoin) └───────────┘──JobFailed──► summary, exit 1
//
// A signal of --signals-to-handle (SIGTERM/SIGINT/SIGHUP/SIGQUIT by default)
// in any state: forward it to the workers, stop them (--shutdown-timeout
// grace, then SIGKILL), Leave, exit 128+signal. A lost server: stop
// the workers, exit 3.
#ifndef MUSTER_AGENT_ELASTIC_AGENT_H_
#define MUSTER_AGENT_ELASTIC_AGENT_H_

#include <atomic>
#include <memory>
#include <string>

#include "muster/agent/config.h"

namespace muster::agent {

class ElasticAgent {
 public:
  explicit ElasticAgent(AgentConfig config);
  ~ElasticAgent();
  ElasticAgent(const ElasticAgent&) = delete;
  ElasticAgent& operator=(const ElasticAgent&) = delete;

  // Runs the job on this node to its end and returns the exit status
  // (exit_codes.h). Must run on a thread that lives as long as the workers (the
  // main thread): Linux sends the workers' parent-death signal when the forking
  // thread exits. Blocks until the job ends.
  int Run();

  // Asks Run to stop the workers and return 128+signal. Async-signal-safe; any
  // thread.
  void RequestStop(int signal);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_ELASTIC_AGENT_H_
