// `muster`: the launcher and per-node elastic agent, with torchrun's command
// line.
//
//   muster --nproc-per-node=4 train.exe
//   muster --nnodes=2 --nproc-per-node=8 --rdzv-endpoint=host:29400
//   --rdzv-id=job train.py
#include <grpc/support/log.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/doctor.h"
#include "cli/launch_flags.h"
#include "cli/python_interpreter.h"
#include "cli/status.h"
#include "muster/agent/elastic_agent.h"
#include "muster/agent/exit_codes.h"
#include "muster/agent/job_keeper.h"
#include "muster/agent/worker_env.h"
#include "muster/common/logging.h"

namespace {

// Wakes the signal thread at exit. A real-time signal: every classic one
// (SIGUSR1/2 included) may be in --signals-to-handle.
int WakeSignal() { return SIGRTMIN; }

// Signals the agent turns into an orderly stop of the workers
// (--signals-to-handle, torchrun's SIGTERM,SIGINT,SIGHUP,SIGQUIT by default).
// They are blocked in every thread (the mask is set before any thread starts)
// and taken by one sigwait thread, so no work runs in a signal handler. Workers
// get a clean mask back before exec.
sigset_t StopSignals(const std::vector<int>& handled) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : handled) sigaddset(&set, sig);
  sigaddset(&set, WakeSignal());
  return set;
}

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
  std::vector<std::string> args(argv + 1, argv + argc);
  const auto env = muster::agent::CurrentEnvironment();
  // Subcommands come first; anything else is a launch (torchrun's command
  // line).
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
  if (std::string line =
          muster::cli::ResolvePythonInterpreter(&command->config, env);
      !line.empty()) {
    MUSTER_LOG(INFO) << line;
  }

  // A closed console must not kill the agent mid-job (nor a keeper that went
  // away: writes to its pipe then fail with EPIPE).
  signal(SIGPIPE, SIG_IGN);
  // Before any thread exists (the keeper forks without exec): what the job
  // starts dies with this process, however it dies (kill -9 included).
  if (absl::Status s = muster::agent::StartJobKeeper(); !s.ok()) {
    MUSTER_LOG(WARNING) << s.message()
                        << "; processes the workers start may outlive a "
                           "launcher killed with SIGKILL";
  }
  sigset_t stop_signals = StopSignals(command->config.signals_to_handle);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  muster::agent::ElasticAgent agent(command->config);
  std::thread signal_thread([&agent, stop_signals] {
    while (true) {
      int sig = 0;
      if (sigwait(&stop_signals, &sig) != 0) continue;
      if (sig == WakeSignal()) return;
      agent.RequestStop(sig);
    }
  });
  int rc = agent.Run();
  pthread_kill(signal_thread.native_handle(), WakeSignal());
  signal_thread.join();
  return rc;
}
