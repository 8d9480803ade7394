#include "cli/launch_flag_table.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/launch_resolve.h"
#include "cli/launch_values.h"
#include "cli/rdzv_conf.h"
#include "muster/common/ids.h"
#include "muster/common/status.h"
#include "muster/rendezvous/auth.h"

namespace muster::cli {
namespace {

using agent::AgentConfig;

// musterd's port, which is also torchrun's c10d default.
constexpr int kDefaultRdzvPort = 29400;
constexpr int kMaxInt = std::numeric_limits<int>::max();

constexpr char kGroupNodes[] = "Nodes and workers";
constexpr char kGroupRdzv[] = "Rendezvous";
constexpr char kGroupStatic[] = "Static rendezvous (torchrun's master)";
constexpr char kGroupProgram[] = "Program";
constexpr char kGroupOutput[] = "Output";

// --- apply helpers for the common kinds of value; `expect` is the message
// after "<source>=<value>: ".

absl::Status IntValue(const LaunchFlag& f, const Given& g,
                      absl::string_view expect, int* out) {
  const IntRange& r = std::get<IntRange>(f.bounds);
  std::optional<int> v = ParseInt(g.value);
  if (!v.has_value() || *v < r.lo || *v > r.hi) return BadValue(g, expect);
  *out = *v;
  return absl::OkStatus();
}

absl::Status OptionalIntValue(const LaunchFlag& f, const Given& g,
                              absl::string_view expect,
                              std::optional<int>* out) {
  int v = 0;
  MUSTER_RETURN_IF_ERROR(IntValue(f, g, expect, &v));
  *out = v;
  return absl::OkStatus();
}

absl::Status DurationValue(const LaunchFlag& f, const Given& g,
                           absl::string_view expect, absl::Duration* out) {
  absl::StatusOr<absl::Duration> d =
      ParseDurationInRange(g.value, std::get<DurationRange>(f.bounds));
  if (!d.ok()) return BadValue(g, expect);
  *out = *d;
  return absl::OkStatus();
}

// A switch (--standalone), which PET_ and --flag=VALUE may also set.
absl::Status SwitchValue(const Given& g, bool* out) {
  std::optional<bool> b = ParseBool(g.value);
  if (!b.has_value()) return BadValue(g, "expected 1 or 0 (true or false)");
  *out = *b;
  return absl::OkStatus();
}

// `g` in lower case without surrounding white space, when it is one of
// `words`; else INVALID_ARGUMENT with `expect`.
absl::StatusOr<std::string> WordValue(
    const Given& g, std::initializer_list<absl::string_view> words,
    absl::string_view expect) {
  std::string w = absl::AsciiStrToLower(absl::StripAsciiWhitespace(g.value));
  if (std::find(words.begin(), words.end(), w) == words.end()) {
    return BadValue(g, expect);
  }
  return w;
}

// --- the flags whose value needs more than one of the helpers

absl::Status ApplyRdzvConf(const Given& g, LaunchSettings* s) {
  // --rdzv-backend comes first in the table, so its value is known here.
  absl::StatusOr<RdzvConf> conf = ParseRdzvConf(
      g.value, RdzvConfScope::kAll, /*etcd_aliases=*/s->backend == "etcd");
  if (!conf.ok()) return BadValue(g, conf.status().message());
  for (const std::string& w : conf->warnings) {
    s->warnings.push_back(absl::StrCat(g.source, ": ", w));
  }
  if (absl::Status applied = conf->ApplyTo(&s->config); !applied.ok()) {
    return BadValue(g, applied.message());
  }
  if (conf->is_host.has_value()) s->is_host = conf->is_host;
  if (conf->lease_timeout.has_value()) s->lease_given = true;
  // Security (docs/security.md): the files are read and checked once here.
  MUSTER_RETURN_IF_ERROR(
      Annotate(s->config.security.Validate(), "--rdzv-conf (PET_RDZV_CONF)"));
  if (!conf->token_file.empty()) {
    absl::StatusOr<std::string> token =
        rendezvous::ReadTokenFile(conf->token_file);
    if (!token.ok()) return Annotate(token.status(), "--rdzv-conf token_file");
    s->config.security.token = *std::move(token);
  }
  return absl::OkStatus();
}

absl::Status ApplyMasterAddr(const Given& g, LaunchSettings* s) {
  absl::string_view addr = absl::StripAsciiWhitespace(g.value);
  if (addr.empty()) return BadValue(g, "expected a host name or address");
  // One colon is a port (an IPv6 address has several): a common slip that
  // would otherwise surface as a resolver error on every worker.
  if (std::count(addr.begin(), addr.end(), ':') == 1) {
    return BadValue(g,
                    "give the host alone and the port with --master-port, "
                    "e.g. --master-addr=node0 --master-port=29500");
  }
  s->master_addr = std::string(addr);
  return absl::OkStatus();
}

absl::Status ApplyRdzvId(const Given& g, LaunchSettings* s) {
  // The server's id grammar (muster/common/ids.h), checked before connecting.
  MUSTER_RETURN_IF_ERROR(
      ValidateId(g.source, g.value, "use e.g. --rdzv-id=job-42"));
  // The id names a log directory (<log-dir>/<run id>/): not "." or "..".
  if (g.value == "." || g.value == "..") {
    return BadValue(g,
                    "expected a job id that is not '.' or '..', e.g. "
                    "--rdzv-id=job-42");
  }
  s->config.run_id = g.value;
  s->run_id_given = true;
  return absl::OkStatus();
}

absl::Status ApplyRdzvBackend(const Given& g, LaunchSettings* s) {
  s->backend = absl::AsciiStrToLower(absl::StripAsciiWhitespace(g.value));
  if (s->backend == "etcd" || s->backend == "etcd-v2") {
    s->warnings.push_back(absl::StrCat(
        g.source, "=", g.value,
        ": muster has no etcd backend; --rdzv-endpoint is taken as the "
        "address of a muster rendezvous server (musterd), not of etcd"));
  } else if (s->backend != "c10d" && s->backend != "static" &&
             s->backend != "muster") {
    return BadValue(g,
                    "expected c10d, static or muster (etcd and etcd-v2 are "
                    "accepted and mean muster's server)");
  }
  return absl::OkStatus();
}

absl::Status ApplyStartMethod(const Given& g, LaunchSettings* s) {
  std::string m = absl::AsciiStrToLower(g.value);
  if (m != "spawn" && m != "fork" && m != "forkserver") {
    return BadValue(g, "expected spawn, fork or forkserver");
  }
  if (m != "spawn") {
    // Python's multiprocessing start methods do not apply to a launcher that
    // execs the program: every worker is a fresh process, as spawn.
    s->warnings.push_back(
        absl::StrCat(g.source, "=", g.value,
                     " has no effect: muster starts every worker as a fresh "
                     "process (fork and exec, like spawn)"));
  }
  return absl::OkStatus();
}

absl::Status ApplyLogsSpecs(const Given& g) {
  absl::string_view v = absl::StripAsciiWhitespace(g.value);
  // torchrun's own default plugin is what muster does: accepted. Any other
  // plugin is Python code muster cannot run.
  if (absl::EqualsIgnoreCase(v, "default") ||
      absl::EqualsIgnoreCase(v, "DefaultLogsSpecs")) {
    return absl::OkStatus();
  }
  return BadValue(
      g,
      "muster cannot load torchrun.logs_specs entry points (Python "
      "plugins); leave --logs-specs out: muster's logs follow torchrun's "
      "DefaultLogsSpecs (--log-dir, -r, -t, --local-ranks-filter, "
      "--duplicate-stdout-filters, --duplicate-stderr-filters)");
}

// Shorthands for the apply column.
using S = LaunchSettings;
using F = LaunchFlag;
using C = FlagContext;
#define MUSTER_APPLY                              \
  [](const F& f [[maybe_unused]], const Given& g, \
     const C& ctx [[maybe_unused]], S* s [[maybe_unused]]) -> absl::Status

// clang-format off
std::vector<LaunchFlag> MakeTable() {
  return {
// --- Nodes and workers
{.name = "nnodes", .value_name = "N|MIN:MAX", .group = kGroupNodes,
 .default_value = "1", .fills = "AgentConfig::min_nodes, max_nodes",
 .help = "Number of nodes, or MIN:MAX for an elastic job. Default 1.",
 .apply = MUSTER_APPLY {
   s->nnodes_given = true;
   s->nnodes_text = g.value;
   return ParseNnodes(g, &s->config.min_nodes, &s->config.max_nodes);
 }},
{.name = "nproc-per-node", .value_name = "N|auto|cpu|gpu", .group = kGroupNodes,
 .default_value = "1", .bounds = IntRange{1, kMaxNprocPerNode},
 .fills = "AgentConfig::nproc_per_node",
 .help = "Workers per node: a number, gpu (one per GPU), cpu (one per CPU) or "
         "auto (gpu when there are GPUs, else cpu). Default 1.",
 .apply = MUSTER_APPLY {
   MUSTER_ASSIGN_OR_RETURN(s->config.nproc_per_node, ParseNproc(g, ctx.host));
   return absl::OkStatus();
 }},
{.name = "node-rank", .value_name = "K", .group = kGroupNodes,
 .bounds = IntRange{0, kMaxInt}, .fills = "LaunchSettings::node_rank",
 .help = "This node's rank, 0..nnodes-1. Required by static multi-node jobs; "
         "a hint with --rdzv-endpoint.",
 .apply = MUSTER_APPLY {
   return OptionalIntValue(f, g, "expected a node rank >= 0", &s->node_rank);
 }},
{.name = "max-restarts", .value_name = "N", .group = kGroupNodes,
 .default_value = "0", .bounds = IntRange{0, kMaxInt},
 .fills = "AgentConfig::max_restarts",
 .help = "Restarts of the worker group after a worker failure before the job "
         "fails. Default 0.",
 .apply = MUSTER_APPLY {
   return IntValue(f, g, "expected a number of restarts >= 0",
                   &s->config.max_restarts);
 }},
{.name = "recovery", .value_name = "in-place|restart", .group = kGroupNodes,
 .default_value = "restart", .fills = "AgentConfig::recovery",
 .help = "What a round's end costs the workers that still run. restart (the "
         "default): every agent stops its workers and starts new ones. "
         "in-place: a node keeps its running workers that opened the control "
         "channel (libmuster_comm, muster.torch), tells them the next round "
         "through $MUSTER_CONTROL_DIR, and restarts only the rest.",
 .apply = MUSTER_APPLY {
   absl::StatusOr<std::string> mode =
       WordValue(g, {"in-place", "restart"},
                 "expected in-place or restart (--recovery=in-place keeps "
                 "running workers across rounds)");
   if (!mode.ok()) return mode.status();
   s->config.recovery = *mode == "in-place" ? agent::Recovery::kInPlace
                                            : agent::Recovery::kRestart;
   return absl::OkStatus();
 }},
{.name = "monitor-interval", .value_name = "SECONDS", .group = kGroupNodes,
 .default_value = "0.1",
 .bounds = DurationRange{absl::Milliseconds(1), absl::Hours(1)},
 .fills = "AgentConfig::monitor_interval",
 .help = "How often worker state is polled when nothing else wakes the "
         "agent. Default 0.1.",
 .apply = MUSTER_APPLY {
   return DurationValue(f, g, "expected seconds from 0.001 to 3600, e.g. 0.1 "
                        "or 5", &s->config.monitor_interval);
 }},
{.name = "no-preflight", .group = kGroupNodes, .default_value = "0",
 .fills = "AgentConfig::preflight (inverted)",
 .help = "Do not probe the other nodes' ports when a round forms (the "
         "preflight fails a round at once when a firewall blocks a peer).",
 .apply = MUSTER_APPLY {
   bool no_preflight = false;
   MUSTER_RETURN_IF_ERROR(SwitchValue(g, &no_preflight));
   s->config.preflight = !no_preflight;
   return absl::OkStatus();
 }},
{.name = "health-port", .value_name = "PORT", .group = kGroupNodes,
 .bounds = IntRange{0, 65535}, .fills = "AgentConfig::health_port",
 .help = "Serve this node's /healthz, /readyz (workers running) and /metrics "
         "over HTTP on this port, for Kubernetes probes. Default: off.",
 .apply = MUSTER_APPLY {
   return IntValue(f, g, "expected a port 0..65535", &s->config.health_port);
 }},
{.name = "worker-timeout", .value_name = "SECONDS", .group = kGroupNodes,
 .default_value = "0", .bounds = DurationRange{},
 .fills = "AgentConfig::worker_timeout",
 .help = "Kill and report as hung a worker that makes no progress for this "
         "long: no libmuster_comm operation or ReportProgress(), and no touch "
         "of the file $MUSTER_PROGRESS_FILE. Default 0: off.",
 .apply = MUSTER_APPLY {
   return DurationValue(f, g, "expected seconds >= 0 (0 turns the watchdog "
                        "off)", &s->config.worker_timeout);
 }},
{.name = "straggler-action", .value_name = "report|replace|exclude",
 .group = kGroupNodes, .default_value = "report",
 .fills = "AgentConfig::straggler_action",
 .help = "What musterd does with a straggler, a rank the others wait for "
         "(its speed under --straggler-threshold of the median's). report "
         "(the default): name it in muster status, the log and the metrics. "
         "replace: swap its node for a spare agent waiting for a place; needs "
         "--recovery=in-place, so that the other nodes keep their processes. "
         "exclude: drop its node while the job keeps --nnodes' minimum. An "
         "excluded node's agent exits 5.",
 .apply = MUSTER_APPLY {
   absl::StatusOr<std::string> action =
       WordValue(g, {"report", "replace", "exclude"},
                 "expected report, replace or exclude (what musterd does "
                 "with a straggler)");
   if (!action.ok()) return action.status();
   s->config.straggler_action =
       *action == "replace"   ? agent::StragglerAction::kReplace
       : *action == "exclude" ? agent::StragglerAction::kExclude
                              : agent::StragglerAction::kReport;
   return absl::OkStatus();
 }},
{.name = "straggler-threshold", .value_name = "F", .group = kGroupNodes,
 .default_value = "0.7", .fills = "AgentConfig::straggler_threshold",
 .help = "A rank whose speed score (1: as fast as the job's median rank, "
         "0.5: half as fast) stays under F over --straggler-window is a "
         "straggler. Between 0 and 1, exclusive. Default 0.7.",
 .apply = MUSTER_APPLY {
   double v = 0;
   // (0, 1): at 1 every rank below the median would be a straggler, and at
   // 0 none ever is. The negated test also refuses NaN.
   if (!absl::SimpleAtod(absl::StripAsciiWhitespace(g.value), &v) ||
       !(v > 0 && v < 1)) {
     return BadValue(g, "expected a fraction of the median speed between 0 "
                        "and 1 (exclusive), e.g. 0.7");
   }
   s->config.straggler_threshold = v;
   return absl::OkStatus();
 }},
{.name = "straggler-window", .value_name = "DURATION", .group = kGroupNodes,
 .default_value = "20s",
 .bounds = DurationRange{absl::Seconds(1), absl::Hours(1)},
 .fills = "AgentConfig::straggler_window",
 .help = "The sliding window musterd scores each rank's speed over: a rank "
         "is named (and acted on) once it stayed slow this long. Seconds or "
         "a duration (30, 1m). Default 20s.",
 .apply = MUSTER_APPLY {
   return DurationValue(f, g, "expected a duration from 1s to 1h, e.g. 20s "
                        "or 1m", &s->config.straggler_window);
 }},
{.name = "exclude-cooldown", .value_name = "DURATION", .group = kGroupNodes,
 .default_value = "10m",
 .bounds = DurationRange{absl::Seconds(1), absl::Hours(168)},
 .fills = "AgentConfig::exclude_cooldown",
 .help = "How long a node excluded from the job (a straggler replaced or "
         "excluded, a failed --health-check, rounds failed in a row) may not "
         "rejoin it. Seconds or a duration (600, 30m). Default 10m.",
 .apply = MUSTER_APPLY {
   return DurationValue(f, g, "expected a duration from 1s to 168h, e.g. "
                        "10m or 1h", &s->config.exclude_cooldown);
 }},
{.name = "exclude-after-failures", .value_name = "N", .group = kGroupNodes,
 .default_value = "0", .bounds = IntRange{0, 1000},
 .fills = "AgentConfig::exclude_after_failures",
 .help = "Exclude from the job, for --exclude-cooldown, a node whose workers "
         "failed N rounds in a row, when the job keeps its minimum node count "
         "without it or a spare takes its place (each failure still costs a "
         "restart). Default 0: never.",
 .apply = MUSTER_APPLY {
   return IntValue(f, g, "expected a number of rounds from 0 (never) to 1000",
                   &s->config.exclude_after_failures);
 }},
{.name = "health-check", .value_name = "CMD", .group = kGroupNodes,
 .fills = "AgentConfig::health_check",
 .help = "A shell command run before each round's join (GPU, NIC, storage "
         "checks). A non-zero exit or a hang past --health-check-timeout "
         "keeps this node out: the agent leaves, prints the command's output "
         "and exits 4; an elastic job forms its round without the node. "
         "Default: none.",
 .apply = MUSTER_APPLY {
   if (absl::StripAsciiWhitespace(g.value).empty()) {
     return BadValue(g, "expected a shell command, e.g. "
                        "--health-check='nvidia-smi -L'");
   }
   s->config.health_check = g.value;
   return absl::OkStatus();
 }},
{.name = "health-check-timeout", .value_name = "SECONDS", .group = kGroupNodes,
 .default_value = "60",
 .bounds = DurationRange{absl::Milliseconds(1), absl::InfiniteDuration()},
 .fills = "AgentConfig::health_check_timeout",
 .help = "How long --health-check may run before it is killed (its whole "
         "process group) and counted as failed. Default 60.",
 .apply = MUSTER_APPLY {
   MUSTER_RETURN_IF_ERROR(DurationValue(
       f, g, "expected seconds > 0", &s->config.health_check_timeout));
   if (s->config.health_check_timeout <= absl::ZeroDuration()) {
     return BadValue(g, "expected seconds > 0");
   }
   return absl::OkStatus();
 }},
{.name = "role", .value_name = "NAME", .group = kGroupNodes,
 .default_value = "default", .fills = "AgentConfig::role",
 .help = "The workers' role (ROLE_NAME). Default \"default\".",
 .apply = MUSTER_APPLY {
   if (absl::StripAsciiWhitespace(g.value).empty()) {
     return BadValue(g, "expected a role name");
   }
   s->config.role = g.value;
   return absl::OkStatus();
 }},
{.name = "start-method", .value_name = "spawn|fork|forkserver",
 .group = kGroupNodes, .default_value = "spawn", .fills = "(nothing)",
 .help = "Accepted for torchrun compatibility: every worker is a fresh "
         "process (fork and exec, like spawn); fork and forkserver warn that "
         "they have no effect.",
 .apply = MUSTER_APPLY { return ApplyStartMethod(g, s); }},
{.name = "shutdown-timeout", .value_name = "SECONDS", .group = kGroupNodes,
 .default_value = "30", .bounds = DurationRange{},
 .fallback_env = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
 .fills = "AgentConfig::stop_grace",
 .help = "How long stopping the workers waits after SIGTERM (or the "
         "forwarded signal) before SIGKILL. Default 30, or "
         "TORCH_ELASTIC_SHUTDOWN_TIMEOUT.",
 .apply = MUSTER_APPLY {
   return DurationValue(f, g, "expected seconds >= 0, e.g. 30 (0 kills at "
                        "once)", &s->config.stop_grace);
 }},
{.name = "signals-to-handle", .value_name = "SIG,...", .group = kGroupNodes,
 .default_value = "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
 .fills = "AgentConfig::signals_to_handle",
 .help = "Signals the launcher forwards to the workers and then stops the job "
         "on (exit 128+N). Default SIGTERM,SIGINT,SIGHUP,SIGQUIT; add "
         "SIGUSR1,SIGUSR2 for Slurm.",
 .apply = MUSTER_APPLY {
   MUSTER_ASSIGN_OR_RETURN(s->config.signals_to_handle, ParseSignalList(g));
   return absl::OkStatus();
 }},
{.name = "numa-binding", .value_name = "node|socket|exclusive|core-complex",
 .group = kGroupNodes, .fills = "AgentConfig::numa_binding",
 .help = "Bind each worker to the CPUs near the GPU of its local rank: the "
         "GPU's NUMA node, its socket, an exclusive share of the node's cores, "
         "or one L3 cache domain. Without GPUs or NUMA information: a "
         "warning, no binding.",
 .apply = MUSTER_APPLY {
   MUSTER_ASSIGN_OR_RETURN(
       s->config.numa_binding,
       WordValue(g, {"node", "socket", "exclusive", "core-complex"},
                 "expected node, socket, exclusive or core-complex"));
   return absl::OkStatus();
 }},
{.name = "virtual-local-rank", .group = kGroupNodes, .default_value = "0",
 .fills = "AgentConfig::virtual_local_rank",
 .help = "Every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES narrowed to "
         "the GPU of its local rank, which it sees as device 0.",
 .apply = MUSTER_APPLY {
   return SwitchValue(g, &s->config.virtual_local_rank);
 }},
{.name = "event-log-handler", .value_name = "null|console",
 .group = kGroupNodes, .default_value = "null",
 .fills = "AgentConfig::event_log_handler",
 .help = "Where torchelastic events go: null (nowhere, the default) or "
         "console (JSON lines on stderr).",
 .apply = MUSTER_APPLY {
   // torchrun's dynamic_rendezvous handler logs nothing too.
   MUSTER_ASSIGN_OR_RETURN(
       std::string h,
       WordValue(g, {"null", "console", "dynamic_rendezvous"},
                 "expected null or console (torchrun's registered handlers; "
                 "muster cannot load others)"));
   s->config.event_log_handler = h == "dynamic_rendezvous" ? "null" : h;
   return absl::OkStatus();
 }},
{.name = "local-addr", .value_name = "ADDR", .group = kGroupNodes,
 .fills = "AgentConfig::local_addr",
 .help = "The address this node advertises to the others. Default: detected.",
 .apply = MUSTER_APPLY {
   s->config.local_addr = g.value;
   return absl::OkStatus();
 }},
// --- Rendezvous
{.name = "standalone", .group = kGroupRdzv, .default_value = "0",
 .fills = "LaunchSettings::standalone",
 .help = "A single-node job with its own rendezvous server on 127.0.0.1 and a "
         "free port.",
 .apply = MUSTER_APPLY { return SwitchValue(g, &s->standalone); }},
{.name = "rdzv-backend", .value_name = "c10d|static|muster",
 .group = kGroupRdzv, .fills = "LaunchSettings::backend",
 .help = "c10d and muster join the muster rendezvous server at "
         "--rdzv-endpoint; static uses --master-addr and --node-rank. "
         "Default: chosen from the other flags.",
 .apply = MUSTER_APPLY { return ApplyRdzvBackend(g, s); }},
{.name = "rdzv-endpoint", .value_name = "HOST[:PORT]", .group = kGroupRdzv,
 .fills = "LaunchSettings::endpoint",
 .help = "The rendezvous server (musterd) to join; port 29400 by default. "
         "This node runs it itself when HOST is this machine and nothing "
         "listens there (see is_host); port 0 then picks a free port (one "
         "node only). Replicas of musterd: H1:P1,H2:P2 (the agent follows "
         "the leader).",
 .apply = MUSTER_APPLY {
   s->endpoint_text = g.value;
   if (!absl::StrContains(g.value, ',')) {
     // Port 0: a free port for the server this node embeds (torchrun's c10d
     // store binds port 0 the same way); cli/launch_resolve.cc checks the
     // rest.
     absl::StatusOr<HostPort> hp = ParseHostPort(g.value, kDefaultRdzvPort,
                                                 /*allow_zero_port=*/true);
     if (!hp.ok()) {
       return BadValue(g, absl::StrCat(hp.status().message(),
                                       "; write HOST[:PORT], e.g. node0:29400"));
     }
     s->endpoint = *hp;
     s->replicas = {*hp};
     return absl::OkStatus();
   }
   // A list "H1:P1,H2:P2" names musterd replicas.
   absl::StatusOr<std::vector<HostPort>> list =
       ParseHostPortList(g.value, kDefaultRdzvPort);
   if (!list.ok()) {
     return BadValue(g, absl::StrCat(list.status().message(),
                                     "; write HOST[:PORT], e.g. node0:29400, "
                                     "or replicas as H1:P1,H2:P2"));
   }
   s->endpoint = list->front();
   s->replicas = *std::move(list);
   return absl::OkStatus();
 }},
{.name = "rdzv-id", .value_name = "ID", .group = kGroupRdzv,
 .fills = "AgentConfig::run_id",
 .help = "The job's id on the rendezvous server; every node of a job gives "
         "the same. Default \"none\" (a random one with --standalone).",
 .apply = MUSTER_APPLY { return ApplyRdzvId(g, s); }},
{.name = "rdzv-conf", .value_name = "KEY=VALUE,...", .group = kGroupRdzv,
 .fills = "AgentConfig timeouts, heartbeat, security; LaunchSettings::is_host",
 .help = "Rendezvous settings, in seconds: join_timeout (alias timeout with "
         "--rdzv-backend=etcd), "
         "last_call_timeout, close_timeout, read_timeout, connect_timeout, "
         "reconnect_timeout, preflight_timeout, keep_alive_interval; "
         "keep_alive_max_attempt; is_host=true|false; tls_ca, tls_cert, "
         "tls_key (PEM files: TLS to musterd); token_file (the job token, or "
         "MUSTER_RDZV_TOKEN; see docs/security.md).",
 .apply = MUSTER_APPLY { return ApplyRdzvConf(g, s); },
 .finish = [](const C& ctx, S* s) { return ResolveTokenFromEnv(ctx.env, s); }},
// --- Static rendezvous
{.name = "master-addr", .value_name = "HOST", .group = kGroupStatic,
 .fills = "LaunchSettings::master_addr",
 .help = "Static mode: node rank 0's address (MASTER_ADDR of the workers). "
         "Default 127.0.0.1.",
 .apply = MUSTER_APPLY { return ApplyMasterAddr(g, s); }},
{.name = "master-port", .value_name = "PORT", .group = kGroupStatic,
 .bounds = IntRange{1, 65535}, .fills = "LaunchSettings::master_port",
 .help = "Static mode: MASTER_PORT of the workers, free for their own store. "
         "Default 29500.",
 .apply = MUSTER_APPLY {
   return OptionalIntValue(f, g, "expected a port number in 1..65535",
                           &s->master_port);
 }},
// --- Program
{.name = "module", .short_name = "m", .group = kGroupProgram,
 .default_value = "0", .fills = "LaunchSettings::module",
 .stage = FlagStage::kProgram,
 .help = "Run PROGRAM as a Python module: python -u -m PROGRAM ARGS...",
 .apply = MUSTER_APPLY { return SwitchValue(g, &s->module); }},
{.name = "no-python", .group = kGroupProgram, .default_value = "0",
 .fills = "LaunchSettings::no_python", .stage = FlagStage::kProgram,
 .help = "Run PROGRAM as given, even when it ends in .py.",
 .apply = MUSTER_APPLY { return SwitchValue(g, &s->no_python); }},
{.name = "run-path", .group = kGroupProgram, .default_value = "0",
 .fills = "LaunchSettings::run_path", .stage = FlagStage::kProgram,
 .help = "Run PROGRAM with the Python interpreter whatever its name.",
 .apply = MUSTER_APPLY { return SwitchValue(g, &s->run_path); }},
{.name = "python", .value_name = "PATH", .group = kGroupProgram,
 .fills = "LaunchSettings::python", .stage = FlagStage::kProgram,
 .help = "The Python interpreter of the workers (a .py PROGRAM, -m, "
         "--run-path). Default: PYTHON_EXEC, else python3 from PATH (python "
         "on Windows), resolved once at start (a pyenv shim becomes the "
         "interpreter it runs).",
 .apply = MUSTER_APPLY {
   s->python = g;  // checked with the program (cli/launch_resolve.cc)
   return absl::OkStatus();
 }},
// --- Output
{.name = "log-dir", .value_name = "DIR", .group = kGroupOutput,
 .fills = "AgentConfig::log_dir",
 .help = "Base directory of the workers' log and error files. Default: a "
         "temporary directory.",
 .apply = MUSTER_APPLY {
   s->config.log_dir = g.value;
   return absl::OkStatus();
 }},
{.name = "redirects", .short_name = "r", .value_name = "0-3|RANK:0-3,...",
 .group = kGroupOutput, .default_value = "0", .fills = "AgentConfig::redirects",
 .help = "Streams written only to log files: 0 none, 1 stdout, 2 stderr, 3 "
         "both; for every local rank or per local rank (0:1,1:2).",
 .apply = MUSTER_APPLY {
   MUSTER_ASSIGN_OR_RETURN(s->config.redirects, ParseStdMap(g));
   return absl::OkStatus();
 }},
{.name = "tee", .short_name = "t", .value_name = "0-3|RANK:0-3,...",
 .group = kGroupOutput, .default_value = "0", .fills = "AgentConfig::tees",
 .help = "Streams written to log files and the console; values as for "
         "--redirects.",
 .apply = MUSTER_APPLY {
   MUSTER_ASSIGN_OR_RETURN(s->config.tees, ParseStdMap(g));
   return absl::OkStatus();
 }},
{.name = "local-ranks-filter", .value_name = "RANK,...", .group = kGroupOutput,
 .fills = "AgentConfig::local_ranks_filter",
 .help = "Only these local ranks' output reaches the console (log files get "
         "everything).",
 .apply = MUSTER_APPLY {
   MUSTER_ASSIGN_OR_RETURN(s->config.local_ranks_filter, ParseRankList(g));
   return absl::OkStatus();
 }},
{.name = "prefix-output", .group = kGroupOutput, .default_value = "0",
 .fills = "AgentConfig::prefix_output, AgentConfig::log_line_prefix_template",
 .help = "Prefix every console line of the workers, teed or not, with "
         "[rank<global rank>]: (muster's own output before torchrun's became "
         "the default), or with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE when "
         "set. Default: as torchrun, lines as the workers write them, and "
         "teed lines (-t) prefixed [<role><local rank>]: or with that "
         "template (${rank}, ${local_rank}, ${role_name}, ${hostname}).",
 .apply = MUSTER_APPLY { return SwitchValue(g, &s->config.prefix_output); },
 .finish = [](const C& ctx, S* s) {
   // torchrun reads the template from its environment only; an empty one is
   // no template.
   auto t = ctx.env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
   if (t != ctx.env.end() && !t->second.empty()) {
     s->config.log_line_prefix_template = t->second;
   } else if (s->config.prefix_output) {
     s->config.log_line_prefix_template = "[rank${rank}]:";
   }
   return absl::OkStatus();
 }},
{.name = "duplicate-stdout-filters", .value_name = "TEXT,...",
 .group = kGroupOutput, .fills = "AgentConfig::duplicate_stdout_filters",
 .help = "Teed stdout lines that contain any of these strings are also "
         "written to attempt_<n>/filtered_stdout.log (,, is a literal comma).",
 .apply = MUSTER_APPLY {
   s->config.duplicate_stdout_filters = ParseFilterList(g.value);
   return absl::OkStatus();
 }},
{.name = "duplicate-stderr-filters", .value_name = "TEXT,...",
 .group = kGroupOutput, .fills = "AgentConfig::duplicate_stderr_filters",
 .help = "As --duplicate-stdout-filters, for stderr (filtered_stderr.log).",
 .apply = MUSTER_APPLY {
   s->config.duplicate_stderr_filters = ParseFilterList(g.value);
   return absl::OkStatus();
 }},
{.name = "logs-specs", .value_name = "NAME", .group = kGroupOutput,
 .default_value = "default", .fills = "(nothing: torchrun's default only)",
 .help = "torchrun's torchrun.logs_specs plugin name. muster cannot load "
         "Python plugins: any value is an error (its logs follow torchrun's "
         "DefaultLogsSpecs).",
 .apply = MUSTER_APPLY { return ApplyLogsSpecs(g); }},
  };
}
// clang-format on

#undef MUSTER_APPLY

}  // namespace

std::string LaunchFlag::UnderscoreName() const {
  std::string s(name);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

std::string LaunchFlag::EnvName() const {
  return absl::StrCat("PET_", absl::AsciiStrToUpper(UnderscoreName()));
}

const std::vector<LaunchFlag>& LaunchFlagTable() {
  static const std::vector<LaunchFlag>* const table =
      new std::vector<LaunchFlag>(MakeTable());
  return *table;
}

const LaunchFlag* FindLaunchFlag(absl::string_view name, bool is_short) {
  for (const LaunchFlag& f : LaunchFlagTable()) {
    if (is_short ? name == f.short_name
                 : (name == f.name || name == f.UnderscoreName())) {
      return &f;
    }
  }
  return nullptr;
}

}  // namespace muster::cli
