// The decisions that combine several of the launcher's flags, after each flag
// was parsed on its own (cli/launch_flag_table.h): cross-flag checks and
// warnings, the rendezvous mode (see the table in cli/launch_flags.h), and
// the program's command line. Internal to cli/; pure (no OS call) except
// ResolveProgram, which asks muster/platform/launch_os.h whether PROGRAM is a
// plain file.
#ifndef MUSTER_CLI_LAUNCH_RESOLVE_H_
#define MUSTER_CLI_LAUNCH_RESOLVE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/launch_flag_table.h"

namespace muster::cli {

inline constexpr char kLaunchUsage[] = "muster [FLAGS] PROGRAM [ARGS...]";

// The job token from MUSTER_RDZV_TOKEN in `env`, when rdzv-conf's token_file
// gave none. Errors: INVALID_ARGUMENT naming the variable (never the token).
absl::Status ResolveTokenFromEnv(const Env& env, LaunchSettings* s);

// Checks and warnings between the output flags, --nproc-per-node and
// --virtual-local-rank (settings for local ranks that will not exist, filters
// of streams that are not teed, too few CUDA_VISIBLE_DEVICES entries).
absl::Status CheckWorkerSettings(const Env& env, LaunchSettings* s);

// Fills the rendezvous fields of s->config (mode, endpoint, embedded server,
// node rank, master address and port) from the mode inputs. Errors:
// INVALID_ARGUMENT for combinations that cannot work, naming the fix.
absl::Status ResolveMode(LaunchSettings* s);

// Fills s->config.program (and the Python interpreter fields) from
// `program_args` (PROGRAM [ARGS...], not empty), -m, --no-python, --run-path,
// --python and PYTHON_EXEC in `env`.
absl::Status ResolveProgram(const std::vector<std::string>& program_args,
                            const Env& env, LaunchSettings* s);

}  // namespace muster::cli

#endif  // MUSTER_CLI_LAUNCH_RESOLVE_H_
