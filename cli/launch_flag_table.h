// The launcher's flags as a table: one LaunchFlag per torchrun flag, holding
// everything about it (spellings, PET_ variable, default, bounds, help, what
// it fills). cli/launch_flags.cc builds the CLI11 parser, the help, the "did
// you mean" list and the PET_ lookup from this table; nothing else names a
// flag. Internal to cli/.
#ifndef MUSTER_CLI_LAUNCH_FLAG_TABLE_H_
#define MUSTER_CLI_LAUNCH_FLAG_TABLE_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "cli/flag_util.h"
#include "cli/launch_flags.h"
#include "muster/agent/config.h"
#include "muster/common/duration.h"
#include "muster/common/net.h"

namespace muster::cli {

using Env = std::map<std::string, std::string>;

// What the flags say, each parsed on its own: the agent's config for the flags
// that fill one of its fields, and the inputs of the decisions that combine
// several flags (the rendezvous mode, the program's command line; see
// cli/launch_resolve.h).
struct LaunchSettings {
  agent::AgentConfig config;
  std::vector<std::string> warnings;

  // --- mode inputs, as given (nullopt / empty / false: not given)
  bool standalone = false;
  std::string backend;               // lower case
  std::optional<HostPort> endpoint;  // the first of `replicas`
  std::vector<HostPort> replicas;    // every entry of --rdzv-endpoint
  std::string endpoint_text;
  std::string nnodes_text;  // as given, for warnings
  bool nnodes_given = false;
  std::optional<int> node_rank;
  std::string master_addr;
  std::optional<int> master_port;
  std::optional<bool> is_host;  // rdzv-conf is_host
  bool lease_given = false;     // rdzv-conf lease_timeout
  bool run_id_given = false;

  // --- program
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::optional<Given> python;  // --python / PET_PYTHON, unchecked
};

// What a flag's apply function may ask beyond the value.
struct FlagContext {
  const Env& env;
  // The host's CPUs and GPUs; asked only by --nproc-per-node=auto|cpu|gpu.
  const std::function<HostResources()>& host;
};

// Inclusive bounds of a whole-number flag.
struct IntRange {
  int lo;
  int hi;
};
// What a flag accepts, where it is a number or a duration (a list, a word or
// a path has none).
using FlagBounds = std::variant<std::monostate, IntRange, DurationRange>;

// When a flag is applied. Value errors are reported in table order, before the
// flags are combined; the program's flags after the mode, because they only
// matter once there is a program to run.
enum class FlagStage { kSettings, kProgram };

struct LaunchFlag {
  // The dash spelling (--nproc-per-node); the underscore spelling
  // (--nproc_per_node) and the PET_ variable (PET_NPROC_PER_NODE) are derived
  // from it, so that the three can never disagree.
  const char* name;
  // A one-letter spelling (-m, -r, -t); "" for none.
  const char* short_name = "";
  // How the help names its value; nullptr for a switch that takes none
  // (--standalone; on the command line it may still be given =0/=1).
  const char* value_name = nullptr;
  const char* group;
  // The value the flag has when it is absent, as a user would type it: giving
  // it changes nothing (tested). nullptr when absence means something no value
  // says (off, detected, chosen from the other flags).
  const char* default_value = nullptr;
  // What the value may be, checked by `apply` (and by the table's test against
  // default_value).
  FlagBounds bounds = {};
  // Read when neither the flag nor its PET_ variable is set (torchrun's
  // TORCH_ELASTIC_SHUTDOWN_TIMEOUT); nullptr for none.
  const char* fallback_env = nullptr;
  // The field the flag fills, for readers: "AgentConfig::max_restarts", or
  // "LaunchSettings::standalone" for one that is combined with others.
  const char* fills;
  FlagStage stage = FlagStage::kSettings;
  // One paragraph for --help, which adds "[env PET_...]" to it.
  const char* help;
  // Parses `value` (from the command line, PET_ or fallback_env; `value.source`
  // names which) into `settings`. Errors: INVALID_ARGUMENT naming the source,
  // the value and the fix.
  absl::Status (*apply)(const LaunchFlag& self, const Given& value,
                        const FlagContext& context, LaunchSettings* settings);
  // Runs at the flag's turn whether it was given or not, after `apply`: what
  // the flag decides even when absent (rdzv-conf: the job token comes from
  // MUSTER_RDZV_TOKEN unless token_file gave one). nullptr for none.
  absl::Status (*finish)(const FlagContext& context,
                         LaunchSettings* settings) = nullptr;

  std::string UnderscoreName() const;  // "nproc_per_node"
  std::string EnvName() const;         // "PET_NPROC_PER_NODE"
  bool takes_value() const { return value_name != nullptr; }
};

// Every flag, in the order of the help.
const std::vector<LaunchFlag>& LaunchFlagTable();

// The flag spelled `name` (either spelling, without dashes; or the one-letter
// spelling when `is_short`); nullptr if none.
const LaunchFlag* FindLaunchFlag(absl::string_view name, bool is_short);

}  // namespace muster::cli

#endif  // MUSTER_CLI_LAUNCH_FLAG_TABLE_H_
