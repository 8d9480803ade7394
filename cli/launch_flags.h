// The launcher's command line: torchrun's flags (both spellings, and PET_*
// environment variables) parsed, validated and resolved into the agent's
// configuration, once.
//
//   muster [FLAGS] PROGRAM [ARGS...]
//   muster [FLAGS] -- PROGRAM [ARGS...]
//
// Everything from the first positional argument on (or after `--`) belongs to
// the training program and is passed through untouched: `muster train.py
// --nnodes 3` gives --nnodes to the program. The precedence of a flag's value
// is: command line, then PET_<FLAG> (Kubeflow's convention, e.g.
// PET_NPROC_PER_NODE), then the default.
//
// Mode resolution (see agent::RendezvousMode), first match wins:
//   --standalone                                  -> kStandalone
//   --rdzv-backend=static, or no backend named and --master-addr with a fixed
//   --nnodes (torchrun's default backend is static; --rdzv-endpoint then only
//   gives the port of the server that node rank 0 runs) -> kStatic
//   --rdzv-endpoint (c10d, muster, etcd*)        -> kDynamic
//   one node, no --master-addr/--master-port      -> kStandalone (embedded
//       server on an ephemeral port, so that two single-node jobs on one
//       machine never fight over a port)
//   a fixed --nnodes=N>1 or --master-port          -> kStatic
//   anything else (elastic --nnodes, or c10d, without an endpoint): an error.
// --master-addr/--master-port are kept in static mode only (elsewhere the
// round's group rank 0 chooses MASTER_ADDR/MASTER_PORT), with a warning.
#ifndef MUSTER_CLI_LAUNCH_FLAGS_H_
#define MUSTER_CLI_LAUNCH_FLAGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "muster/agent/config.h"

namespace muster::cli {

// The result of parsing the launcher's command line.
struct LaunchCommand {
  // Complete and validated; meaningless when show_help or show_version is set.
  agent::AgentConfig config;
  // --help / -h was given: print help_text to stdout and exit 0 (nothing else
  // was validated).
  bool show_help = false;
  // --version was given: print the version and exit 0.
  bool show_version = false;
  // The formatted help (always filled in).
  std::string help_text;
  // Things that work but are probably not what the user meant (ignored flags,
  // deprecated backends, a default that only works on one machine). One
  // sentence each, no "warning:" prefix; the caller prints them to stderr
  // before starting.
  std::vector<std::string> warnings;
};

// What the machine offers, for --nproc-per-node=auto|cpu|gpu.
struct HostResources {
  int cpus = 1;  // CPUs this process may run on (sched_getaffinity), at least 1
  int gpus = 0;  // NVIDIA GPUs visible to this process
  // Where the GPU count came from, for error messages
  // ("/proc/driver/nvidia/gpus/").
  std::string gpu_source;
};

// Counts CPUs and NVIDIA GPUs without linking CUDA: GPUs are the entries of
// /proc/driver/nvidia/gpus/ (else the /dev/nvidia<N> device files), limited by
// CUDA_VISIBLE_DEVICES from `env` when set (as torch.cuda.device_count() would
// be). Never fails; reads a few /proc and /dev entries.
HostResources DetectHostResources(
    const std::map<std::string, std::string>& env);

// Parses `args` (argv[1..], without the program name) with `env` (the process
// environment; PET_* and PYTHON_EXEC are read from it) into a LaunchCommand.
// Errors: INVALID_ARGUMENT whose message names the flag (or PET_ variable), the
// bad value and the fix, e.g. `--nproc-per-node=abc: expected a number, "auto",
// "cpu" or "gpu"`, `unknown flag --nproc-per-nodes (did you mean
// --nproc-per-node?)` or `ambiguous flag --no: it abbreviates --node-rank,
// --no-preflight, --no-python; ...` (an unambiguous prefix of a long flag is
// that flag, as with torchrun's argparse, with a warning). The caller prints
// it and exits agent::kExitConfigError.
// Does not block; thread-compatible. The overload without `host` calls
// DetectHostResources(env) only when --nproc-per-node asks for it.
absl::StatusOr<LaunchCommand> ParseLaunchCommand(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env);
absl::StatusOr<LaunchCommand> ParseLaunchCommand(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env, const HostResources& host);

// Checks that the program of `config` can be started: its executable exists (a
// path, or a name found in PATH of `env`) and, for a Python script, that the
// script exists. Returns INVALID_ARGUMENT naming what is missing. Separate from
// parsing so that parsing stays pure; the launcher calls it before joining a
// rendezvous, to fail fast on a typo.
absl::Status CheckProgram(const agent::AgentConfig& config,
                          const std::map<std::string, std::string>& env);

}  // namespace muster::cli

#endif  // MUSTER_CLI_LAUNCH_FLAGS_H_
