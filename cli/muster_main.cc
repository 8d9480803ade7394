// `muster`: the launcher and per-node elastic agent, with torchrun's command
// line.
//
// clang-format off
//   muster --nproc-per-node=4 train.exe
//   muster --nnodes=2 --nproc-per-node=8 --rdzv-endpoint=host:29400 --rdzv-id=job train.py
// clang-format on
#include <grpc/support/log.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cli/doctor.h"
#include "cli/launch_flags.h"
#include "cli/python_interpreter.h"
#include "cli/stacks.h"
#include "cli/status.h"
#include "muster/agent/elastic_agent.h"
#include "muster/agent/exit_codes.h"
#include "muster/agent/worker_env.h"
#include "muster/common/logging.h"
#include "muster/platform/env.h"
#include "muster/platform/job_keeper.h"
#include "muster/platform/launch_os.h"
#include "muster/platform/stop_requests.h"

namespace {

// gRPC's own log lines go to our logger at debug level: the launcher reports
// the failures that matter in its own words (a taken port, for one, would
// otherwise come first as a raw gRPC line).
void GrpcLogToMuster(gpr_log_func_args* args) {
  MUSTER_LOG(DEBUG) << "grpc: " << args->file << ":" << args->line << ": "
                    << args->message;
}

}  // namespace

int main(int argc, char** argv) {
  muster::SetLogTag("muster");
  gpr_set_log_function(GrpcLogToMuster);
  // As in musterd: Debian's Abseil (built without NDEBUG) runs its deadlock
  // detector on every absl::Mutex lock, 2 % of a standalone launch's CPU.
  // Tests keep it on; the launcher does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<std::string> args(argv + 1, argv + argc);
  const auto env = muster::agent::CurrentEnvironment();
  // Subcommands come first; anything else is a launch (torchrun's command
  // line).
  if (!args.empty() && args[0] == "stacks") {
    return muster::cli::RunStacks({args.begin() + 1, args.end()}, env);
  }
  if (!args.empty() && args[0] == "status") {
    return muster::cli::RunStatus({args.begin() + 1, args.end()}, env);
  }
  if (!args.empty() && args[0] == "doctor") {
    return muster::cli::RunDoctor({args.begin() + 1, args.end()}, env);
  }
  auto command = muster::cli::ParseLaunchCommand(args, env);
  if (!command.ok()) {
    std::fprintf(stderr, "muster: %s\nRun 'muster --help' for the flags.\n",
                 std::string(command.status().message()).c_str());
    return muster::agent::kExitConfigError;
  }
  if (command->show_help) {
    std::fputs(command->help_text.c_str(), stdout);
    return 0;
  }
  if (command->show_version) {
    std::printf("muster %s\n", MUSTER_VERSION);
    return 0;
  }
  for (const std::string& w : command->warnings) MUSTER_LOG(WARNING) << w;
  // A program that cannot run fails here, before this node joins a rendezvous
  // and holds up the other nodes.
  if (absl::Status s = muster::cli::CheckProgram(command->config, env);
      !s.ok()) {
    std::fprintf(stderr, "muster: %s\n", std::string(s.message()).c_str());
    return muster::agent::kExitConfigError;
  }

  // torchrun runs workers with its own interpreter; muster resolves the one it
  // will use (a pyenv shim becomes the interpreter behind it) and says which.
  bool finds_muster = false;
  if (std::string line = muster::cli::ResolvePythonInterpreter(
          &command->config, env, &finds_muster);
      !line.empty()) {
    MUSTER_LOG(INFO) << line;
  }
  // `import muster.torch` in every worker with no setup: the launcher's own
  // package when the interpreter finds none (a virtual environment, the build
  // tree). Its directory holds only `muster`, so no other package comes with
  // it. Set before any thread starts; the agent copies the environment into
  // every worker's.
  const std::string python_dir =
      muster::cli::MusterPythonDir(muster::platform::os::LauncherPath());
  auto pythonpath = env.find("PYTHONPATH");
  if (std::optional<std::string> value = muster::cli::WorkerPythonPath(
          pythonpath != env.end()
              ? std::optional<std::string>(pythonpath->second)
              : std::nullopt,
          python_dir, !command->config.python_interpreter.empty(),
          finds_muster)) {
    muster::platform::os::SetProcessEnv("PYTHONPATH", *value);
    MUSTER_LOG(DEBUG) << "workers import muster from " << python_dir
                      << " (PYTHONPATH)";
  }

  // A closed console must not kill the agent mid-job (nor a keeper that went
  // away: writes to its pipe then fail with EPIPE).
  muster::platform::IgnoreBrokenPipes();
  // Before any thread exists (the keeper forks without exec): what the job
  // starts dies with this process, however it dies (kill -9 included). On
  // Windows there is none (UNIMPLEMENTED): each worker's kill-on-close job
  // object does that.
  if (absl::Status s = muster::platform::StartJobKeeper();
      !s.ok() && !absl::IsUnimplemented(s)) {
    MUSTER_LOG(WARNING) << s.message()
                        << "; processes the workers start may outlive a "
                           "launcher killed with SIGKILL";
  }
  // The signals the agent turns into an orderly stop of the workers
  // (--signals-to-handle, torchrun's SIGTERM,SIGINT,SIGHUP,SIGQUIT by
  // default): blocked in every thread (before any thread starts) and taken by
  // one watcher thread, so no work runs in a signal handler. Workers get a
  // clean mask back before exec.
  muster::platform::StopRequests stop_requests(
      command->config.signals_to_handle);

  muster::agent::ElasticAgent agent(command->config);
  stop_requests.StartWatcher([&agent](int sig) { agent.RequestStop(sig); });
  return agent.Run();
}
