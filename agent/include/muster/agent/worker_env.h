// The worker environment contract (docs/migrating-from-torchrun.md, "The
// worker environment"), built in one place.
#ifndef MUSTER_AGENT_WORKER_ENV_H_
#define MUSTER_AGENT_WORKER_ENV_H_

#include <map>
#include <string>

namespace muster::agent {

// What the round tells one worker.
struct WorkerEnvParams {
  int local_rank = 0;
  int rank = 0;  // global
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  // The role's ranks; with one role they equal the global ones.
  int role_rank = 0;
  int role_world_size = 1;
  std::string role_name = "default";
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id;
  std::string error_file;
  std::string store_endpoint;  // MUSTER_STORE_ENDPOINT
  std::string store_prefix;    // MUSTER_STORE_PREFIX
  long long round = 0;         // MUSTER_ROUND
  std::string progress_file;   // MUSTER_PROGRESS_FILE (unset when empty)
  // --recovery=in-place: MUSTER_CONTROL_DIR, with MUSTER_RECOVERY=in-place
  // (both unset when empty).
  std::string control_dir;
  // --virtual-local-rank: LOCAL_RANK=0, and CUDA_VISIBLE_DEVICES narrowed to
  // entry local_rank of base's list (or to "local_rank" when base has none).
  bool virtual_local_rank = false;
  // The round's Store credential (MUSTER_STORE_TOKEN) and the TLS files of
  // the store client (MUSTER_STORE_TLS_CA/CERT/KEY); each unset when empty.
  std::string store_token;
  std::string store_tls_ca;
  std::string store_tls_cert;
  std::string store_tls_key;
};

// Returns `base` (the agent's own environment) with the contract's variables
// set: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
// GROUP_WORLD_SIZE, ROLE_RANK, ROLE_NAME, ROLE_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
// TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE=False,
// TORCHELASTIC_ERROR_FILE, TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and
// NCCL_ASYNC_ERROR_HANDLING=1 (torch 1.13-2.1 read the latter; a value the
// user set for either name is copied to the other), OMP_NUM_THREADS=1 (unless
// set in base, and only when local_world_size > 1), MUSTER_STORE_ENDPOINT,
// MUSTER_STORE_PREFIX, MUSTER_RUN_ID, MUSTER_ROUND, and MUSTER_PROGRESS_FILE
// when progress_file is set (else removed), MUSTER_RECOVERY=in-place and
// MUSTER_CONTROL_DIR when control_dir is set (else removed), MUSTER_STORE_TOKEN
// and MUSTER_STORE_TLS_* when set (else removed). The job token
// (MUSTER_RDZV_TOKEN) is always removed: workers never see it. Values are
// formatted as torchrun formats them (decimal integers, "False").
std::map<std::string, std::string> BuildWorkerEnv(
    const std::map<std::string, std::string>& base,
    const WorkerEnvParams& params);

// The current process's environment as a map.
std::map<std::string, std::string> CurrentEnvironment();

}  // namespace muster::agent

#endif  // MUSTER_AGENT_WORKER_ENV_H_
