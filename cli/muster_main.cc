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
#include "cli/status.h"
#include "muster/agent/elastic_agent.h"
#include "muster/agent/exit_codes.h"
#include "muster/agent/worker_env.h"
#include "muster/common/logging.h"

namespace {

// Signals the agent turns into an orderly stop of the workers. They are blocked
// in every thread (the mask is set before any thread starts) and taken by one
// sigwait thread, so no work runs in a signal handler. Workers get a clean mask
// back before exec.
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR2);  // private: wakes the signal thread at exit
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  muster::SetLogTag("muster");
  // gRPC's own lines (a failed TLS handshake, for one) at debug level: muster
  // names such failures itself, with the fix.
  gpr_set_log_function([](gpr_log_func_args* args) {
    MUSTER_LOG(DEBUG) << "grpc: " << args->file << ":" << args->line << ": "
                      << args->message;
  });
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

  // A closed console must not kill the agent mid-job.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  muster::agent::ElasticAgent agent(command->config);
  std::thread signal_thread([&agent, stop_signals] {
    while (true) {
      int sig = 0;
      if (sigwait(&stop_signals, &sig) != 0) continue;
      if (sig == SIGUSR2) return;
      agent.RequestStop(sig);
    }
  });
  int rc = agent.Run();
  pthread_kill(signal_thread.native_handle(), SIGUSR2);
  signal_thread.join();
  return rc;
}
