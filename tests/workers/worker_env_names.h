// The variables of the worker environment contract (README, "The worker
// environment") that the stand-in workers print with --print-env, one
// `env NAME=VALUE` line each (`<unset>` when absent): test_worker on Linux,
// win_worker on Windows. Platform-only names (MUSTER_STOP_EVENT on Windows,
// CUDA_VISIBLE_DEVICES where GPUs are) are listed too; elsewhere they print
// as `<unset>`.
#ifndef MUSTER_TESTS_WORKERS_WORKER_ENV_NAMES_H_
#define MUSTER_TESTS_WORKERS_WORKER_ENV_NAMES_H_

namespace muster::testing {

inline constexpr const char* kWorkerEnvNames[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_ASYNC_ERROR_HANDLING",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MUSTER_STORE_ENDPOINT",
    "MUSTER_STORE_PREFIX",
    "MUSTER_RUN_ID",
    "MUSTER_ROUND",
    "MUSTER_STOP_EVENT",
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_WORKERS_WORKER_ENV_NAMES_H_
