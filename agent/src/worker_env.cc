#include "muster/agent/worker_env.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "muster/platform/env.h"

namespace muster::agent {

std::map<std::string, std::string> BuildWorkerEnv(
    const std::map<std::string, std::string>& base,
    const WorkerEnvParams& params) {
  std::map<std::string, std::string> env = base;
  auto set = [&env](const char* name, std::string value) {
    env[name] = std::move(value);
  };
  // Values as torchrun writes them: str(int) and str(bool).
  auto num = [](long long v) { return absl::StrCat(v); };

  set("RANK", num(params.rank));
  set("LOCAL_RANK", num(params.local_rank));
  set("WORLD_SIZE", num(params.world_size));
  set("LOCAL_WORLD_SIZE", num(params.local_world_size));
  set("GROUP_RANK", num(params.group_rank));
  set("GROUP_WORLD_SIZE", num(params.group_world_size));
  set("ROLE_RANK", num(params.role_rank));
  set("ROLE_NAME", params.role_name);
  set("ROLE_WORLD_SIZE", num(params.role_world_size));
  set("MASTER_ADDR", params.master_addr);
  set("MASTER_PORT", num(params.master_port));
  set("TORCHELASTIC_RESTART_COUNT", num(params.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", num(params.max_restarts));
  set("TORCHELASTIC_RUN_ID", params.run_id);
  // Workers open their own TCPStore at MASTER_ADDR:MASTER_PORT; the agent's
  // store is muster's.
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  if (!params.error_file.empty()) {
    set("TORCHELASTIC_ERROR_FILE", params.error_file);
  } else {
    // An agent started under another launcher inherits that launcher's error
    // file; its workers must not write their failures there.
    env.erase("TORCHELASTIC_ERROR_FILE");
  }
  // Without it PyTorch does not abort NCCL collectives that time out: a rank
  // whose peer died can hang in one instead of failing, and the agent never
  // learns. The user's own choice wins.
  // torch 1.13 to 2.1 read the old name, 2.2 and later the new one (and warn
  // when the old one is set, once per process): both are set, as the user's
  // value of either one.
  {
    auto user = env.find("TORCH_NCCL_ASYNC_ERROR_HANDLING");
    if (user == env.end()) user = env.find("NCCL_ASYNC_ERROR_HANDLING");
    const std::string value = user != env.end() ? user->second : "1";
    env.emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", value);
    env.emplace("NCCL_ASYNC_ERROR_HANDLING", value);
  }
  // Several workers per node each starting one OpenMP thread per core
  // oversubscribe the CPUs many times over; torchrun sets 1 for the same
  // reason. The user's own choice wins.
  if (params.local_world_size > 1) env.emplace("OMP_NUM_THREADS", "1");

  if (params.virtual_local_rank) {
    // torchrun's --virtual-local-rank: the worker sees its own GPU as device 0.
    set("LOCAL_RANK", "0");
    std::string device = num(params.local_rank);
    auto cvd = base.find("CUDA_VISIBLE_DEVICES");
    if (cvd != base.end()) {
      std::vector<std::string> devices = absl::StrSplit(cvd->second, ',');
      // The launcher checked that the list is long enough.
      if (params.local_rank < static_cast<int>(devices.size())) {
        device = std::string(absl::StripAsciiWhitespace(
            devices[static_cast<size_t>(params.local_rank)]));
      }
    }
    set("CUDA_VISIBLE_DEVICES", device);
  }

  set("MUSTER_STORE_ENDPOINT", params.store_endpoint);
  set("MUSTER_STORE_PREFIX", params.store_prefix);
  set("MUSTER_RUN_ID", params.run_id);
  set("MUSTER_ROUND", num(params.round));
  // Like the error file: an inherited progress file belongs to an outer
  // launcher.
  if (!params.progress_file.empty()) {
    set("MUSTER_PROGRESS_FILE", params.progress_file);
  } else {
    env.erase("MUSTER_PROGRESS_FILE");
  }
  // --recovery=in-place: the worker's control channel (docs/architecture.md,
  // "Control channel"). Without it a library leaves the channel alone, so an
  // inherited one (an outer launcher's) is removed.
  if (!params.control_dir.empty()) {
    set("MUSTER_RECOVERY", "in-place");
    set("MUSTER_CONTROL_DIR", params.control_dir);
  } else {
    env.erase("MUSTER_RECOVERY");
    env.erase("MUSTER_CONTROL_DIR");
  }
  // Workers never see the job token; they get their round's Store credential.
  env.erase("MUSTER_RDZV_TOKEN");
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string&>{"MUSTER_STORE_TOKEN",
                                                   params.store_token},
        {"MUSTER_STORE_TLS_CA", params.store_tls_ca},
        {"MUSTER_STORE_TLS_CERT", params.store_tls_cert},
        {"MUSTER_STORE_TLS_KEY", params.store_tls_key}}) {
    if (value.empty()) {
      env.erase(name);
    } else {
      set(name, value);
    }
  }
  return env;
}

std::map<std::string, std::string> CurrentEnvironment() {
  return platform::CurrentEnvironment();
}

}  // namespace muster::agent
