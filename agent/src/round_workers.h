// What a round's workers are: each local rank's WorkerSpec (argv, the worker
// environment of docs/migrating-from-torchrun.md "The worker environment",
// error and progress files, CPUs) and the output routing of -r/-t, made from
// the agent's config and the server's RoundReady; and the round's line in the
// log. Pure apart from creating the per-rank directories.
#ifndef MUSTER_AGENT_SRC_ROUND_WORKERS_H_
#define MUSTER_AGENT_SRC_ROUND_WORKERS_H_

#include <map>
#include <string>
#include <vector>

#include "muster/agent/config.h"
#include "muster/agent/worker_env.h"
#include "muster/agent/worker_group.h"
#include "muster/store/security.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::agent {

struct RoundWorkers {
  std::vector<WorkerSpec> workers;
  // Local rank i's MUSTER_PROGRESS_FILE, for the watchdog.
  std::vector<std::string> progress_files;
  // Local rank i's round values (its environment's; the control channel's
  // `round` under --recovery=in-place).
  std::vector<WorkerEnvParams> params;
  // Local rank i's MUSTER_STACKS_FILE (the Python bootstrap's faulthandler
  // dump, agent/src/stack_capture.h); empty when the program is not run
  // through Python.
  std::vector<std::string> stacks_files;
  OutputOptions output;
};

// Local rank `local`'s round values for `ready` (see MakeRoundWorkers for the
// arguments): the environment of a new worker, and the `round` file of a kept
// one (whose attempt_dir stays the one it was started in).
WorkerEnvParams MakeWorkerParams(const AgentConfig& config,
                                 const v1::RoundReady& ready, int local,
                                 const std::string& attempt_dir,
                                 const std::string& store_endpoint,
                                 const store::ClientSecurity& security);

// `attempt_dir` is <run_dir>/attempt_<n>; `store_endpoint` the workers'
// MUSTER_STORE_ENDPOINT; `security` the session's (its token derives the
// round's Store credential); `base_env` the agent's environment (with the job
// keeper's tag); `numa_cpus[i]` local rank i's CPUs (may be shorter).
RoundWorkers MakeRoundWorkers(
    const AgentConfig& config, const v1::RoundReady& ready,
    const std::string& attempt_dir, const std::string& store_endpoint,
    const store::ClientSecurity& security,
    const std::map<std::string, std::string>& base_env,
    const std::vector<std::vector<int>>& numa_cpus);

// The round for the log: "round R: node G/N, ranks A..B of W, master H:P,
// restarts R/M".
std::string DescribeRound(const AgentConfig& config,
                          const v1::RoundReady& ready);

// The job's log directory, torchrun's layout: a new folder
// <--log-dir>/<run_id>_<random> (mode 0700) per run, so an earlier run's logs
// are never overwritten, or <tmp>/muster-XXXXXX/<run_id>_<random> without
// --log-dir (*temporary set). A directory that cannot be made is logged, and
// <base>/<run_id> returned all the same.
std::string MakeRunDir(const AgentConfig& config, bool* temporary);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_ROUND_WORKERS_H_
