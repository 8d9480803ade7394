// ElasticAgent: the per-node agent behind `muster`. It joins the rendezvous
// (embedding the server when the mode asks for it), starts this node's workers
// for each round, reports how they ended, follows Restart / JobSucceeded /
// JobFailed from the server, and turns the outcome into an exit status with a
// failure summary that names the root cause.
//
// Agent states (transitions in ElasticAgent::Run's loop, one place):
//
// clang-format off
//   ┌──────────┐ RoundReady ┌─────────┐ all workers exit 0 ┌───────────┐ JobSucceeded
//   │ JOINING  │───────────►│ RUNNING │───────────────────►│ REPORTED  │──────────────► exit 0
//   └──────────┘            └─────────┘                    └───────────┘
//      ▲  ▲                  │  │ a worker failed: stop the rest,  │
//      │  │ Restart          │  │ WorkersFailed                    │ Restart
//      │  └──────────────────┘  ▼                                  │
//      │                    ┌───────────┐                          │
//      └────────────────────│ REPORTED  │◄─────────────────────────┘
//          Restart (rejoin) └───────────┘──JobFailed──► summary, exit 1
// clang-format on
//
// A signal of --signals-to-handle (SIGTERM/SIGINT/SIGHUP/SIGQUIT by default)
// in any state: forward it to the workers, stop them (--shutdown-timeout
// grace, then SIGKILL), Leave, exit 128+signal. A lost server: stop
// the workers, exit 3.
//
// Seams (AgentDeps): the clock every timeout of the agent is read on, the
// launcher that starts the workers, and the factory of rendezvous sessions.
// `muster` uses the real ones; tests/agent/elastic_agent_test.cc drives the
// agent with a FakeClock, a FakeProcessLauncher and a fake session.
#ifndef MUSTER_AGENT_ELASTIC_AGENT_H_
#define MUSTER_AGENT_ELASTIC_AGENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "muster/agent/config.h"
#include "muster/platform/clock.h"
#include "muster/platform/process.h"
#include "muster/rendezvous/client.h"

namespace muster::agent {

// What the agent takes from outside. A null member gets the real one.
struct AgentDeps {
  // What the agent reads time on and sleeps on (reconnect backoff, the
  // watchdog, event timestamps). Not owned. Default: Clock::Real().
  Clock* clock = nullptr;
  // Starts each round's workers. Not owned. Default:
  // platform::ProcessLauncher::Default().
  platform::ProcessLauncher* launcher = nullptr;
  // Opens a session with the rendezvous server at options.endpoint (the first
  // one and every reconnect). Default: the in-process rendezvous of
  // --standalone, else NewGrpcRendezvousClient. When set, it serves every
  // session, whatever the mode.
  std::function<std::unique_ptr<rendezvous::RendezvousClient>(
      const rendezvous::GrpcClientOptions& options)>
      new_client;
};

class ElasticAgent {
 public:
  explicit ElasticAgent(AgentConfig config);
  ElasticAgent(AgentConfig config, AgentDeps deps);
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
