// The worker environment of one sample worker, for the tests of what is built
// from it (the environment, the control channel's round file).
#ifndef MUSTER_TESTS_AGENT_WORKER_ENV_SAMPLE_H_
#define MUSTER_TESTS_AGENT_WORKER_ENV_SAMPLE_H_

#include "muster/agent/worker_env.h"

namespace muster::agent {

// Node B (group rank 1) of a heterogeneous 2-node job: node A runs 3 workers,
// node B 2, so B's local rank 1 is global rank 3 + 1 = 4 of 5.
inline WorkerEnvParams NodeBRank1() {
  WorkerEnvParams p;
  p.local_rank = 1;
  p.rank = 4;
  p.world_size = 5;
  p.local_world_size = 2;
  p.group_rank = 1;
  p.group_world_size = 2;
  p.role_rank = 4;
  p.role_world_size = 5;
  p.role_name = "trainer";
  p.master_addr = "10.0.0.1";
  p.master_port = 29500;
  p.restart_count = 2;
  p.max_restarts = 3;
  p.run_id = "job-42";
  p.error_file = "/tmp/logs/job-42/attempt_2/1/error.json";
  p.store_endpoint = "10.0.0.1:29400";
  p.store_prefix = "job-42/2/";
  p.round = 7;
  return p;
}

}  // namespace muster::agent

#endif  // MUSTER_TESTS_AGENT_WORKER_ENV_SAMPLE_H_
