#include "agent/src/round_workers.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/src/python_prelude.h"
#include "agent/src/stack_capture.h"
#include "muster/agent/worker_env.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/platform/files.h"
#include "muster/rendezvous/auth.h"

namespace muster::agent {

WorkerEnvParams MakeWorkerParams(const AgentConfig& config,
                                 const v1::RoundReady& ready, int local,
                                 const std::string& attempt_dir,
                                 const std::string& store_endpoint,
                                 const store::ClientSecurity& security) {
  WorkerEnvParams p;
  p.local_rank = local;
  p.rank = ready.rank_offset() + local;
  p.world_size = ready.world_size();
  p.local_world_size = config.nproc_per_node;
  p.group_rank = ready.group_rank();
  p.group_world_size = ready.group_world_size();
  p.role_rank = p.rank;
  p.role_world_size = ready.world_size();
  p.role_name = config.role;
  p.master_addr = ready.master_addr();
  p.master_port = ready.master_port();
  p.restart_count = ready.restart_count();
  p.max_restarts = ready.max_restarts();
  p.run_id = config.run_id;
  p.error_file = absl::StrCat(attempt_dir, "/", local, "/error.json");
  p.progress_file = absl::StrCat(attempt_dir, "/", local, "/progress");
  p.store_endpoint = store_endpoint;
  p.store_prefix = ready.store_prefix();
  p.round = ready.round();
  p.virtual_local_rank = config.virtual_local_rank;
  if (!security.token.empty()) {
    p.store_token =
        rendezvous::DeriveStoreCredential(security.token, p.store_prefix);
  }
  p.store_tls_ca = security.tls_ca;
  p.store_tls_cert = security.tls_cert;
  p.store_tls_key = security.tls_key;
  if (config.recovery == Recovery::kInPlace) {
    p.control_dir = absl::StrCat(attempt_dir, "/", local, "/control");
  }
  return p;
}

RoundWorkers MakeRoundWorkers(
    const AgentConfig& config, const v1::RoundReady& ready,
    const std::string& attempt_dir, const std::string& store_endpoint,
    const store::ClientSecurity& security,
    const std::map<std::string, std::string>& base_env,
    const std::vector<std::vector<int>>& numa_cpus) {
  RoundWorkers round;
  for (int local = 0; local < config.nproc_per_node; ++local) {
    WorkerEnvParams p = MakeWorkerParams(config, ready, local, attempt_dir,
                                         store_endpoint, security);
    round.progress_files.push_back(p.progress_file);
    std::error_code ec;
    std::filesystem::create_directories(absl::StrCat(attempt_dir, "/", local),
                                        ec);
    WorkerSpec spec;
    spec.local_rank = local;
    spec.global_rank = p.rank;
    spec.argv = config.program;
    spec.error_file = p.error_file;
    spec.env = BuildWorkerEnv(base_env, p);
    // `muster stacks` for Python workers: the prelude and its dump file.
    bool prelude = false;
    spec.argv = WithStacksPrelude(config.program, config.python_interpreter,
                                  base_env, &prelude);
    round.stacks_files.push_back(
        prelude ? absl::StrCat(attempt_dir, "/", local, "/stacks.txt")
                : std::string());
    AddStacksEnv(round.stacks_files.back(), &spec.env);
    if (static_cast<size_t>(local) < numa_cpus.size())
      spec.cpu_affinity = numa_cpus[static_cast<size_t>(local)];
    round.workers.push_back(std::move(spec));
    round.params.push_back(std::move(p));
  }
  OutputOptions& output = round.output;
  output.redirects = config.redirects;
  output.tees = config.tees;
  output.console_local_ranks = config.local_ranks_filter;
  output.attempt_dir = attempt_dir;
  output.line_prefix_template = config.log_line_prefix_template;
  output.prefix_all_lines = config.prefix_output;
  output.role = config.role;
  if (output.line_prefix_template.find("hostname") != std::string::npos) {
    output.hostname = LocalHostname();
  }
  output.duplicate_stdout_filters = config.duplicate_stdout_filters;
  output.duplicate_stderr_filters = config.duplicate_stderr_filters;
  return round;
}

std::string DescribeRound(const AgentConfig& config,
                          const v1::RoundReady& ready) {
  return absl::StrCat("round ", ready.round(), ": node ", ready.group_rank(),
                      "/", ready.group_world_size(), ", ranks ",
                      ready.rank_offset(), "..",
                      ready.rank_offset() + config.nproc_per_node - 1, " of ",
                      ready.world_size(), ", master ", ready.master_addr(), ":",
                      ready.master_port(), ", restarts ", ready.restart_count(),
                      "/", ready.max_restarts());
}

std::string MakeRunDir(const AgentConfig& config, bool* temporary) {
  namespace fs = std::filesystem;
  *temporary = false;
  std::string base = config.log_dir;
  if (base.empty()) {
    auto dir = platform::MakeTempDirectory("muster-");
    if (dir.ok()) {
      base = *dir;
      *temporary = true;
    }
  } else {
    std::error_code ec;
    fs::create_directories(base, ec);
  }
  // torchrun's DefaultLogsSpecs: tempfile.mkdtemp(prefix=f"{run_id}_",
  // dir=log_dir), so every run gets a folder of its own, even a rerun with
  // the same id, and two agents of one job on one host never share one.
  absl::StatusOr<std::string> run_dir =
      platform::MakeTempDirectory(absl::StrCat(config.run_id, "_"), base);
  if (run_dir.ok()) return *run_dir;
  MUSTER_LOG(WARNING) << "cannot create the log directory: "
                      << run_dir.status().message()
                      << "; check --log-dir (logs and error files of this "
                         "run are lost)";
  return (fs::path(base.empty() ? "." : base) / config.run_id).string();
}

}  // namespace muster::agent
