// The launcher's command line, driven by the flag table
// (cli/launch_flag_table.h): CLI11 reads the flags the table declares, PET_
// variables fill what the command line did not give, then each flag's value
// is applied and the flags are combined (cli/launch_resolve.h).
#include "cli/launch_flags.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/flag_util.h"
#include "cli/launch_flag_table.h"
#include "cli/launch_resolve.h"
#include "cli/slurm.h"
#include "muster/common/status.h"
#include "muster/platform/env.h"
#include "muster/platform/files.h"
#include "muster/platform/launch_os.h"

namespace muster::cli {

namespace os = platform::os;
namespace {

using agent::AgentConfig;

// All spellings, for "did you mean".
std::vector<std::string> AllFlagSpellings() {
  const std::vector<LaunchFlag>& table = LaunchFlagTable();
  std::vector<std::string> out;
  // Dash spellings first: on a tie they are the ones suggested.
  for (const LaunchFlag& f : table) out.push_back(absl::StrCat("--", f.name));
  out.push_back("--help");
  out.push_back("--version");
  for (const LaunchFlag& f : table) {
    if (f.UnderscoreName() != f.name)
      out.push_back(absl::StrCat("--", f.UnderscoreName()));
  }
  for (const LaunchFlag& f : table) {
    if (*f.short_name != '\0') out.push_back(absl::StrCat("-", f.short_name));
  }
  out.push_back("-h");
  return out;
}

absl::Status UnknownFlagError(const std::string& arg) {
  std::string flag = arg.substr(0, arg.find('='));
  std::string best;
  int best_distance = 1 << 30;
  for (const std::string& known : AllFlagSpellings()) {
    int d = EditDistance(flag, known);
    if (d < best_distance) {
      best_distance = d;
      best = known;
    }
  }
  // Close enough to be a typo: two edits, or a quarter of a long name. A
  // single-letter flag is too short for any guess to mean something.
  // (Abbreviations never get here: ExpandAbbreviations took them.)
  const int tolerance = std::max<int>(2, static_cast<int>(flag.size()) / 4);
  std::string suggestion;
  if (flag.size() > 2 && best_distance <= tolerance) suggestion = best;
  if (!suggestion.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag ", flag, " (did you mean ", suggestion, "?)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown flag ", flag, "; the program's own flags go after it: ",
      kLaunchUsage, " (muster --help lists the launcher's flags)"));
}

// The long flags a prefix may abbreviate: the table's, both spellings, and
// --help and --version (argparse's own).
struct LongFlag {
  std::string spelling;  // "--nproc_per_node"
  std::string flag;      // "nproc-per-node": one entry per flag, not spelling
  bool takes_value;
};

std::vector<LongFlag> LongFlags() {
  std::vector<LongFlag> out;
  for (const LaunchFlag& f : LaunchFlagTable()) {
    out.push_back({absl::StrCat("--", f.name), f.name, f.takes_value()});
    if (f.UnderscoreName() != f.name) {
      out.push_back(
          {absl::StrCat("--", f.UnderscoreName()), f.name, f.takes_value()});
    }
  }
  out.push_back({"--help", "help", false});
  out.push_back({"--version", "version", false});
  return out;
}

// torchrun's argparse takes any unambiguous prefix of a long flag (PyTorch's
// own tests write --redirect=3 for --redirects), so muster does too: each
// abbreviation among the launcher's flags is replaced by the flag's full
// spelling, in the spelling it abbreviates. A prefix of both spellings of one
// flag (--nproc) is that flag. Scans as CLI11 will: the launcher's part ends
// at `--` or at the first positional argument, and a flag's separate value is
// skipped. Errors: INVALID_ARGUMENT for a prefix of several flags, naming
// them. Each abbreviation adds a warning: a flag added later could make it
// ambiguous.
absl::StatusOr<std::vector<std::string>> ExpandAbbreviations(
    std::vector<std::string> args, std::vector<std::string>* warnings) {
  const std::vector<LongFlag> flags = LongFlags();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;
    if (a[1] != '-') {  // -r 3, -r3, -m: one letter, never abbreviated
      const LaunchFlag* f = FindLaunchFlag(a.substr(1, 1), /*is_short=*/true);
      if (a.size() == 2 && f != nullptr && f->takes_value()) ++i;
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const LongFlag* exact = nullptr;
    std::vector<const LongFlag*> matches;
    for (const LongFlag& f : flags) {
      if (f.spelling == name) exact = &f;
      if (name.size() > 2 && absl::StartsWith(f.spelling, name)) {
        matches.push_back(&f);
      }
    }
    const LongFlag* chosen = exact;
    if (chosen == nullptr && !matches.empty()) {
      std::vector<std::string> distinct;  // one spelling per flag
      for (const LongFlag* m : matches) {
        if (std::find(distinct.begin(), distinct.end(), m->flag) ==
            distinct.end()) {
          distinct.push_back(m->flag);
        }
      }
      if (distinct.size() > 1) {
        std::vector<std::string> names;
        for (const std::string& d : distinct) names.push_back("--" + d);
        return absl::InvalidArgumentError(absl::StrCat(
            "ambiguous flag ", name, ": it abbreviates ",
            absl::StrJoin(names, ", "), "; write more of its name"));
      }
      chosen = matches.front();  // the first spelling it abbreviates
      warnings->push_back(absl::StrCat(
          name, " taken as ", chosen->spelling,
          " (an abbreviation, as torchrun's argparse takes it; write the "
          "full name, which a later flag cannot make ambiguous)"));
      a = eq == std::string::npos
              ? chosen->spelling
              : absl::StrCat(chosen->spelling, a.substr(eq));
    }
    if (chosen != nullptr && chosen->takes_value && eq == std::string::npos) {
      ++i;  // its value
    }
  }
  return args;
}

constexpr char kDescription[] =
    "Starts PROGRAM --nproc-per-node times on this node and keeps the\n"
    "workers of all nodes in one job: rendezvous, restarts, failure\n"
    "propagation. Flags are torchrun's, in either spelling\n"
    "(--nproc-per-node or --nproc_per_node), and are also read from\n"
    "PET_<FLAG> environment variables; the command line wins.\n"
    "Everything from PROGRAM on is passed to the program untouched.\n";

constexpr char kExamples[] =
    "Examples:\n"
    "  one node, 4 workers:\n"
    "    muster --nproc-per-node=4 train.py --lr 0.1\n"
    "  two nodes, static (on each node, with its own --node-rank):\n"
    "    muster --nnodes=2 --node-rank=0 --master-addr=node0 \\\n"
    "           --nproc-per-node=8 ./train\n"
    "  elastic, 1 to 4 nodes, joining a musterd:\n"
    "    muster --nnodes=1:4 --rdzv-endpoint=musterd:29400 \\\n"
    "           --rdzv-id=job42 train.py\n";

// Usage in torchrun's words instead of CLI11's "[OPTIONS]" (the program is not
// a CLI11 positional: it and everything after it are left unparsed), and the
// description after it rather than before.
class LaunchFormatter : public CLI::Formatter {
 public:
  std::string make_description(const CLI::App*) const override { return ""; }
  std::string make_usage(const CLI::App* app, std::string) const override {
    return absl::StrCat("Usage: ", kLaunchUsage, "\n\n",
                        app->get_description());
  }
};

struct ParsedArgs {
  // Abbreviated flags taken (ExpandAbbreviations).
  std::vector<std::string> warnings;
  // By dash name: from the command line, PET_ or the flag's fallback_env.
  std::map<std::string, Given> values;
  std::vector<std::string> program_args;
  bool show_help = false;
  bool show_version = false;
  std::string help_text;
};

// CLI11 reads `--flag=` (an empty value) as `--flag` and takes the next
// argument as its value, which would swallow the program's name. Such flags are
// rejected before CLI11 sees them, scanning the launcher's part of the command
// line as CLI11 does: it ends at `--` or at the first positional argument.
absl::Status RejectEmptyValues(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;
    const bool is_short = a[1] != '-';
    if (is_short && a.size() != 2) continue;  // -r2: its value is attached
    const size_t eq = a.find('=');
    const LaunchFlag* f =
        is_short ? FindLaunchFlag(a.substr(1), /*is_short=*/true)
                 : FindLaunchFlag(a.substr(2, eq == a.npos ? a.npos : eq - 2),
                                  /*is_short=*/false);
    if (f == nullptr || !f->takes_value()) continue;
    const std::string named = is_short ? absl::StrCat(a, "/--", f->name)
                                       : absl::StrCat("--", f->name);
    if (is_short || eq == a.npos) {
      if (i + 1 == args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(named, ": expected a value (", f->value_name, ")"));
      }
      ++i;  // its value
    } else if (eq + 1 == a.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(named, "=: expected a value (", f->value_name, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedArgs> RunCli11(const std::vector<std::string>& given,
                                    const Env& env) {
  CLI::App app(kDescription, "muster");
  app.footer(kExamples);
  app.formatter(std::make_shared<LaunchFormatter>());
  app.get_formatter()->column_width(44);
  // The first positional ends the launcher's flags; it and the rest are the
  // program's.
  app.prefix_command();
  // A flag given twice takes the last value, as with argparse: wrappers append
  // overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  const std::vector<LaunchFlag>& table = LaunchFlagTable();
  std::vector<CLI::Option*> options;
  for (const LaunchFlag& f : table) {
    std::string names =
        *f.short_name != '\0' ? absl::StrCat("-", f.short_name, ",") : "";
    absl::StrAppend(&names, "--", f.name);
    if (f.UnderscoreName() != f.name)
      absl::StrAppend(&names, ",--", f.UnderscoreName());
    // const: CLI11's add_flag(name, non-const string&) would bind the flag's
    // result to it.
    const std::string help = absl::StrCat(f.help, " [env ", f.EnvName(), "]");
    CLI::Option* opt = f.takes_value() ? app.add_option(names, help)
                                       : app.add_flag(names, help);
    if (f.takes_value()) opt->type_name(f.value_name);
    opt->group(f.group);
    options.push_back(opt);
  }
  const std::string version_help = "Print the version and exit.";
  CLI::Option* version = app.add_flag("--version", version_help);

  ParsedArgs out;
  out.help_text = app.help();
  MUSTER_ASSIGN_OR_RETURN(const std::vector<std::string> args,
                          ExpandAbbreviations(given, &out.warnings));
  MUSTER_RETURN_IF_ERROR(RejectEmptyValues(args));
  // CLI11 consumes its argument vector from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out.show_help = true;
    return out;
  } catch (const CLI::ParseError& e) {
    // RejectEmptyValues already named the usual causes (a flag without its
    // value); whatever else CLI11 finds, its own words say best.
    return absl::InvalidArgumentError(absl::StrCat(
        e.what(), "; write the value after the flag: --FLAG=VALUE"));
  }
  out.show_version = version->count() > 0;

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() != "--" && rest.front().size() > 1 &&
      rest.front()[0] == '-') {
    return UnknownFlagError(rest.front());
  }
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  out.program_args = std::move(rest);

  for (size_t i = 0; i < table.size(); ++i) {
    const LaunchFlag& f = table[i];
    if (options[i]->count() > 0 && !options[i]->results().empty()) {
      out.values[f.name] =
          Given{options[i]->results().back(), absl::StrCat("--", f.name)};
      continue;
    }
    // torchrun reads PET_<FLAG> as the flag's default. An empty variable counts
    // as unset: job templates often export every PET_ name, some of them empty.
    for (const std::string& var :
         {f.EnvName(), std::string(f.fallback_env ? f.fallback_env : "")}) {
      auto it = var.empty() ? env.end() : env.find(var);
      if (it != env.end() && !it->second.empty()) {
        out.values[f.name] = Given{it->second, it->first};
        break;
      }
    }
  }
  return out;
}

// Applies the flags of `stage` that were given, in table order (and each
// flag's finish step, given or not).
absl::Status ApplyFlags(FlagStage stage,
                        const std::map<std::string, Given>& values,
                        const FlagContext& context, LaunchSettings* settings) {
  for (const LaunchFlag& f : LaunchFlagTable()) {
    if (f.stage != stage) continue;
    if (auto it = values.find(f.name); it != values.end()) {
      MUSTER_RETURN_IF_ERROR(f.apply(f, it->second, context, settings));
    }
    if (f.finish != nullptr)
      MUSTER_RETURN_IF_ERROR(f.finish(context, settings));
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchCommand> Parse(
    const std::vector<std::string>& args, const Env& env,
    const std::function<HostResources()>& host) {
  MUSTER_ASSIGN_OR_RETURN(ParsedArgs parsed, RunCli11(args, env));
  LaunchCommand cmd;
  cmd.warnings = std::move(parsed.warnings);
  cmd.help_text = std::move(parsed.help_text);
  cmd.show_help = parsed.show_help;
  cmd.show_version = parsed.show_version;
  if (cmd.show_help || cmd.show_version) return cmd;

  // Inside a Slurm allocation the node layout comes from Slurm, for the flags
  // the user did not give (cli/slurm.h).
  MUSTER_ASSIGN_OR_RETURN(
      std::vector<ImpliedFlag> slurm,
      SlurmImpliedFlags(
          env, [&parsed](absl::string_view flag) -> const std::string* {
            auto it = parsed.values.find(std::string(flag));
            return it == parsed.values.end() ? nullptr : &it->second.value;
          }));
  for (ImpliedFlag& f : slurm) {
    parsed.values[f.flag] = Given{std::move(f.value), std::move(f.source)};
  }

  const FlagContext context{env, host};
  LaunchSettings s;
  MUSTER_RETURN_IF_ERROR(
      ApplyFlags(FlagStage::kSettings, parsed.values, context, &s));
  MUSTER_RETURN_IF_ERROR(CheckWorkerSettings(env, &s));
  MUSTER_RETURN_IF_ERROR(ResolveMode(&s));
  if (parsed.program_args.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no training program given: ", kLaunchUsage));
  }
  MUSTER_RETURN_IF_ERROR(
      ApplyFlags(FlagStage::kProgram, parsed.values, context, &s));
  MUSTER_RETURN_IF_ERROR(ResolveProgram(parsed.program_args, env, &s));
  cmd.config = std::move(s.config);
  cmd.warnings.insert(cmd.warnings.end(), s.warnings.begin(), s.warnings.end());
  return cmd;
}

// /dev/nvidia0, /dev/nvidia1, ...; not nvidiactl, nvidia-uvm, nvidia-caps.
bool IsGpuDeviceName(absl::string_view name) {
  return absl::ConsumePrefix(&name, "nvidia") && !name.empty() &&
         std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isdigit(c); });
}

}  // namespace

HostResources DetectHostResources(const Env& env) {
  HostResources h;
  h.cpus = os::UsableCpuCount();
  // The driver lists one directory per GPU here; a container runtime shows only
  // the GPUs it passed in. Linking CUDA to count them would make the launcher
  // depend on a driver.
  int physical = static_cast<int>(
      platform::ListDirectory("/proc/driver/nvidia/gpus").size());
  h.gpu_source = "/proc/driver/nvidia/gpus/";
  if (physical == 0) {
    const std::vector<std::string> dev = platform::ListDirectory("/dev");
    physical = static_cast<int>(
        std::count_if(dev.begin(), dev.end(), IsGpuDeviceName));
    h.gpu_source = "no entries in /proc/driver/nvidia/gpus/ or /dev/nvidia<N>";
    if (physical > 0) h.gpu_source = "/dev/nvidia<N>";
  }
  h.gpus = physical;
  auto cvd = env.find("CUDA_VISIBLE_DEVICES");
  if (physical > 0 && cvd != env.end()) {
    // As CUDA reads it: the list ends at the first invalid entry ("-1" hides
    // everything).
    int visible = 0;
    for (absl::string_view item : absl::StrSplit(cvd->second, ',')) {
      item = absl::StripAsciiWhitespace(item);
      if (item.empty() || item[0] == '-') break;
      ++visible;
    }
    h.gpus = std::min(physical, visible);
    if (h.gpus == 0) {
      h.gpu_source = absl::StrCat(
          physical, " GPU(s), all hidden by CUDA_VISIBLE_DEVICES=\"",
          cvd->second, "\"");
    } else {
      h.gpu_source = absl::StrCat(h.gpu_source, " and CUDA_VISIBLE_DEVICES");
    }
  }
  return h;
}

absl::StatusOr<LaunchCommand> ParseLaunchCommand(
    const std::vector<std::string>& args, const Env& env) {
  return Parse(args, env, [&env] { return DetectHostResources(env); });
}

absl::StatusOr<LaunchCommand> ParseLaunchCommand(
    const std::vector<std::string>& args, const Env& env,
    const HostResources& host) {
  return Parse(args, env, [&host] { return host; });
}

absl::Status CheckProgram(const AgentConfig& config, const Env& env) {
  if (config.program.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no training program given: ", kLaunchUsage));
  }
  const std::string& exe = config.program.front();
  if (os::HasDirectory(exe)) {
    os::PathKind kind = os::StatPath(exe);
    if (kind == os::PathKind::kMissing &&
        platform::FindExecutable(exe, "").ok()) {
      kind =
          os::PathKind::kExecutableFile;  // Windows: dir/train is dir/train.exe
    }
    if (kind == os::PathKind::kMissing) {
      return absl::InvalidArgumentError(absl::StrCat(exe, ": no such file"));
    }
    if (kind != os::PathKind::kExecutableFile) {
      return absl::InvalidArgumentError(
          absl::StrCat(exe,
                       ": not an executable file (chmod +x it, or run it "
                       "through its interpreter)"));
    }
  } else {
    auto path = env.find("PATH");
    if (!platform::FindExecutable(
             exe, path != env.end() ? path->second
                                    : std::string(os::kDefaultSearchPath))
             .ok()) {
      std::string hint;
      if (os::StatPath(exe) == os::PathKind::kExecutableFile) {
        hint = absl::StrCat("; to run the one in this directory write ./", exe);
      } else if (config.program.size() > 1 && config.program[1] == "-u") {
        hint =
            "; give the Python interpreter with --python=PATH (or "
            "PYTHON_EXEC=PATH)";
      }
      return absl::InvalidArgumentError(
          absl::StrCat(exe, ": not found in PATH", hint));
    }
  }
  // A script run through Python: [python, -u, script, ...] or --run-path's
  // [python, -u, -c, bootstrap, script, ...] (not [python, -u, -m, module]).
  const bool run_path = config.program.size() > 4 &&
                        config.program[1] == "-u" && config.program[2] == "-c";
  if (config.program.size() > 2 && config.program[1] == "-u" &&
      config.program[2] != "-m") {
    const std::string& script = config.program[run_path ? 4 : 2];
    const os::PathKind kind = os::StatPath(script);
    if (kind != os::PathKind::kExecutableFile &&
        kind != os::PathKind::kPlainFile) {
      return absl::InvalidArgumentError(absl::StrCat(script, ": no such file"));
    }
  }
  return absl::OkStatus();
}

}  // namespace muster::cli
