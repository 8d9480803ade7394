#include "cli/launch_flags.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "cli/slurm.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/rendezvous/auth.h"

namespace muster::cli {
namespace {

using agent::AgentConfig;
using agent::RendezvousMode;
using Env = std::map<std::string, std::string>;

// musterd's port, which is also torchrun's c10d default.
constexpr int kDefaultRdzvPort = 29400;
// torchrun's default MASTER_PORT in static mode.
constexpr int kDefaultMasterPort = 29500;

constexpr char kUsage[] = "muster [FLAGS] PROGRAM [ARGS...]";

// One torchrun flag. `name` is the dash spelling; the underscore spelling and
// the PET_ variable are derived from it, so that the three can never disagree.
struct FlagSpec {
  const char* name;
  const char* short_name;  // "" for none
  bool takes_value;
  const char* value_name;
  const char* group;
  const char* help;
};

constexpr char kGroupNodes[] = "Nodes and workers";
constexpr char kGroupRdzv[] = "Rendezvous";
constexpr char kGroupStatic[] = "Static rendezvous (torchrun's master)";
constexpr char kGroupProgram[] = "Program";
constexpr char kGroupOutput[] = "Output";

const FlagSpec kFlags[] = {
    {"nnodes", "", true, "N|MIN:MAX", kGroupNodes,
     "Number of nodes, or MIN:MAX for an elastic job. Default 1."},
    {"nproc-per-node", "", true, "N|auto|cpu|gpu", kGroupNodes,
     "Workers per node: a number, gpu (one per GPU), cpu (one per CPU) or auto "
     "(gpu when there are GPUs, else cpu). Default 1."},
    {"node-rank", "", true, "K", kGroupNodes,
     "This node's rank, 0..nnodes-1. Required by static multi-node jobs; a "
     "hint with --rdzv-endpoint."},
    {"max-restarts", "", true, "N", kGroupNodes,
     "Restarts of the worker group after a worker failure before the job "
     "fails. Default 0."},
    {"monitor-interval", "", true, "SECONDS", kGroupNodes,
     "How often worker state is polled when nothing else wakes the agent. "
     "Default 0.1."},
    {"no-preflight", "", false, "", kGroupNodes,
     "Do not probe the other nodes' ports when a round forms (the preflight "
     "fails a round at once when a firewall blocks a peer)."},
    {"health-port", "", true, "PORT", kGroupNodes,
     "Serve this node's /healthz, /readyz (workers running) and /metrics "
     "over HTTP on this port, for Kubernetes probes. Default: off."},
    {"worker-timeout", "", true, "SECONDS", kGroupNodes,
     "Kill and report as hung a worker that makes no progress for this "
     "long: no libmuster_comm operation or ReportProgress(), and no touch of "
     "the file $MUSTER_PROGRESS_FILE. Default 0: off."},
    {"role", "", true, "NAME", kGroupNodes,
     "The workers' role (ROLE_NAME). Default \"default\"."},
    {"start-method", "", true, "spawn|fork|forkserver", kGroupNodes,
     "Accepted for torchrun compatibility: every worker is a fresh process "
     "(fork and exec, like spawn); fork and forkserver warn that they have no "
     "effect."},
    {"shutdown-timeout", "", true, "SECONDS", kGroupNodes,
     "How long stopping the workers waits after SIGTERM (or the forwarded "
     "signal) before SIGKILL. Default 30, or TORCH_ELASTIC_SHUTDOWN_TIMEOUT."},
    {"signals-to-handle", "", true, "SIG,...", kGroupNodes,
     "Signals the launcher forwards to the workers and then stops the job on "
     "(exit 128+N). Default SIGTERM,SIGINT,SIGHUP,SIGQUIT; add SIGUSR1,SIGUSR2 "
     "for Slurm."},
    {"numa-binding", "", true, "node|socket|exclusive|core-complex",
     kGroupNodes,
     "Bind each worker to the CPUs near the GPU of its local rank: the GPU's "
     "NUMA node, its socket, an exclusive share of the node's cores, or one "
     "L3 cache domain. Without GPUs or NUMA information: a warning, no "
     "binding."},
    {"virtual-local-rank", "", false, "", kGroupNodes,
     "Every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES narrowed to the "
     "GPU of its local rank, which it sees as device 0."},
    {"event-log-handler", "", true, "null|console", kGroupNodes,
     "Where torchelastic events go: null (nowhere, the default) or console "
     "(JSON lines on stderr)."},
    {"local-addr", "", true, "ADDR", kGroupNodes,
     "The address this node advertises to the others. Default: detected."},
    {"standalone", "", false, "", kGroupRdzv,
     "A single-node job with its own rendezvous server on 127.0.0.1 and a free "
     "port."},
    {"rdzv-backend", "", true, "c10d|static|muster", kGroupRdzv,
     "c10d and muster join the muster rendezvous server at --rdzv-endpoint; "
     "static uses --master-addr and --node-rank. Default: chosen from the "
     "other flags."},
    {"rdzv-endpoint", "", true, "HOST[:PORT]", kGroupRdzv,
     "The rendezvous server (musterd) to join; port 29400 by default. This "
     "node runs it itself when HOST is this machine and nothing listens there "
     "(see is_host)."},
    {"rdzv-id", "", true, "ID", kGroupRdzv,
     "The job's id on the rendezvous server; every node of a job gives the "
     "same. Default \"none\" (a random one with --standalone)."},
    {"rdzv-conf", "", true, "KEY=VALUE,...", kGroupRdzv,
     "Rendezvous settings, in seconds: join_timeout (alias timeout), "
     "last_call_timeout, close_timeout, read_timeout, connect_timeout, "
     "reconnect_timeout, preflight_timeout, keep_alive_interval; "
     "keep_alive_max_attempt; "
     "is_host=true|false; tls_ca, tls_cert, tls_key (PEM files: TLS to "
     "musterd); token_file (the job token, or MUSTER_RDZV_TOKEN; see "
     "docs/security.md)."},
    {"master-addr", "", true, "HOST", kGroupStatic,
     "Static mode: node rank 0's address (MASTER_ADDR of the workers). Default "
     "127.0.0.1."},
    {"master-port", "", true, "PORT", kGroupStatic,
     "Static mode: MASTER_PORT of the workers, free for their own store. "
     "Default 29500."},
    {"module", "m", false, "", kGroupProgram,
     "Run PROGRAM as a Python module: python -u -m PROGRAM ARGS..."},
    {"no-python", "", false, "", kGroupProgram,
     "Run PROGRAM as given, even when it ends in .py."},
    {"run-path", "", false, "", kGroupProgram,
     "Run PROGRAM with the Python interpreter whatever its name."},
    {"python", "", true, "PATH", kGroupProgram,
     "The Python interpreter of the workers (a .py PROGRAM, -m, --run-path). "
     "Default: PYTHON_EXEC, else python3 from PATH, resolved once at start "
     "(a pyenv shim becomes the interpreter it runs)."},
    {"log-dir", "", true, "DIR", kGroupOutput,
     "Base directory of the workers' log and error files. Default: a temporary "
     "directory."},
    {"redirects", "r", true, "0-3|RANK:0-3,...", kGroupOutput,
     "Streams written only to log files: 0 none, 1 stdout, 2 stderr, 3 both; "
     "for every local rank or per local rank (0:1,1:2)."},
    {"tee", "t", true, "0-3|RANK:0-3,...", kGroupOutput,
     "Streams written to log files and the console; values as for "
     "--redirects."},
    {"local-ranks-filter", "", true, "RANK,...", kGroupOutput,
     "Only these local ranks' output reaches the console (log files get "
     "everything)."},
    {"duplicate-stdout-filters", "", true, "TEXT,...", kGroupOutput,
     "Teed stdout lines that contain any of these strings are also written to "
     "attempt_<n>/filtered_stdout.log (,, is a literal comma)."},
    {"duplicate-stderr-filters", "", true, "TEXT,...", kGroupOutput,
     "As --duplicate-stdout-filters, for stderr (filtered_stderr.log)."},
    {"logs-specs", "", true, "NAME", kGroupOutput,
     "torchrun's torchrun.logs_specs plugin name. muster cannot load Python "
     "plugins: any value is an error (its logs follow torchrun's "
     "DefaultLogsSpecs)."},
};

std::string Underscored(absl::string_view dashed) {
  std::string s(dashed);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

std::string EnvName(absl::string_view dashed) {
  return absl::StrCat("PET_", absl::AsciiStrToUpper(Underscored(dashed)));
}

// A value as the user gave it, and where: "--nnodes" or "PET_NNODES". Errors
// name `source`, because a bad PET_ variable is otherwise a mystery to someone
// who typed no such flag.
struct Given {
  std::string value;
  std::string source;
};

absl::Status BadValue(const Given& g, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(g.source, "=", g.value, ": ", why));
}

// Optimal string alignment distance, for "did you mean".
int EditDistance(absl::string_view a, absl::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::vector<std::string> AllFlagSpellings() {
  std::vector<std::string> out;
  // Dash spellings first: on a tie they are the ones suggested.
  for (const FlagSpec& f : kFlags) out.push_back(absl::StrCat("--", f.name));
  out.push_back("--help");
  out.push_back("--version");
  for (const FlagSpec& f : kFlags) {
    if (Underscored(f.name) != f.name)
      out.push_back(absl::StrCat("--", Underscored(f.name)));
  }
  for (const FlagSpec& f : kFlags) {
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
  // Flags that `flag` abbreviates, counting both spellings of one flag once.
  std::vector<std::string> abbreviated;
  for (const FlagSpec& f : kFlags) {
    if (flag.size() <= 3) break;  // "--" and one letter abbreviate too much
    const std::string dashed = absl::StrCat("--", f.name);
    const std::string underscored = absl::StrCat("--", Underscored(f.name));
    if (absl::StartsWith(dashed, flag)) {
      abbreviated.push_back(dashed);
    } else if (absl::StartsWith(underscored, flag)) {
      abbreviated.push_back(underscored);
    }
  }
  // Close enough to be a typo: two edits, or a quarter of a long name. A
  // single-letter flag is too short for any guess to mean something.
  const int tolerance = std::max<int>(2, static_cast<int>(flag.size()) / 4);
  std::string suggestion;
  if (flag.size() > 2 && best_distance <= tolerance) {
    suggestion = best;
  } else if (abbreviated.size() == 1) {
    // argparse accepts unambiguous abbreviations (--nproc); we name the full
    // flag instead of guessing, so that a later flag with the same prefix
    // cannot change what a script means.
    suggestion = abbreviated.front();
  }
  if (!suggestion.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag ", flag, " (did you mean ", suggestion, "?)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown flag ", flag, "; the program's own flags go after it: ", kUsage,
      " (muster --help lists the launcher's flags)"));
}

std::optional<bool> ParseBool(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  // "-1" is how CLI11 spells a flag given as --flag=false.
  if (t == "0" || t == "false" || t == "no" || t == "off" || t == "-1")
    return false;
  return std::nullopt;
}

std::optional<int> ParseInt(absl::string_view text) {
  int v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v))
    return std::nullopt;
  return v;
}

// Seconds as torchrun takes them ("30", "0.5"), or an absl duration ("500ms",
// "2m").
std::optional<absl::Duration> ParseSeconds(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  double seconds = 0;
  if (absl::SimpleAtod(t, &seconds)) {
    if (!std::isfinite(seconds) || seconds < 0) return std::nullopt;
    return absl::Seconds(seconds);
  }
  absl::Duration d;
  if (absl::ParseDuration(t, &d) && d >= absl::ZeroDuration() &&
      d != absl::InfiniteDuration()) {
    return d;
  }
  return std::nullopt;
}

absl::StatusOr<int> IntInRange(const Given& g, int lo, int hi,
                               absl::string_view what) {
  std::optional<int> v = ParseInt(g.value);
  if (!v.has_value() || *v < lo || *v > hi) {
    return BadValue(g, what);
  }
  return *v;
}

// --nnodes: "N" or "MIN:MAX".
absl::Status ParseNnodes(const Given& g, int* min_nodes, int* max_nodes) {
  static constexpr char kForm[] =
      "expected N or MIN:MAX, e.g. --nnodes=2 or --nnodes=1:4";
  std::vector<std::string> parts = absl::StrSplit(g.value, ':');
  if (parts.size() > 2) return BadValue(g, kForm);
  std::optional<int> lo = ParseInt(parts[0]);
  std::optional<int> hi = parts.size() == 2 ? ParseInt(parts[1]) : lo;
  if (!lo.has_value() || !hi.has_value()) return BadValue(g, kForm);
  if (*lo < 1) {
    return BadValue(g, absl::StrCat("a job needs at least 1 node; ", kForm));
  }
  if (*hi < *lo) {
    return BadValue(
        g, absl::StrCat("MAX (", *hi, ") is below MIN (", *lo,
                        "); write MIN:MAX with MIN <= MAX, e.g. --nnodes=", *hi,
                        ":", *lo));
  }
  *min_nodes = *lo;
  *max_nodes = *hi;
  return absl::OkStatus();
}

// The most workers one agent starts. Far above any machine's cores or GPUs,
// and low enough that a typo (an extra digit, INT32_MAX) is refused at once
// instead of fork-bombing the node; a job's world size is capped again by the
// server (kMaxWorldSize in the coordinator).
constexpr int kMaxNprocPerNode = 4096;

// --nproc-per-node: a number, "auto", "cpu" or "gpu". `host` is asked only for
// the words.
absl::StatusOr<int> ParseNproc(const Given& g,
                               const std::function<HostResources()>& host) {
  std::string word = absl::AsciiStrToLower(absl::StripAsciiWhitespace(g.value));
  static constexpr char kForm[] =
      "expected a number, \"auto\", \"cpu\" or \"gpu\"";
  if (word == "auto" || word == "cpu" || word == "gpu") {
    HostResources h = host();
    if (word == "cpu") return std::max(1, h.cpus);
    if (h.gpus > 0) return h.gpus;
    if (word == "auto") return std::max(1, h.cpus);
    return BadValue(
        g, absl::StrCat("no NVIDIA GPU found (", h.gpu_source,
                        "); give a number of workers, \"cpu\" or \"auto\""));
  }
  std::optional<int> n = ParseInt(word);
  if (!n.has_value()) return BadValue(g, kForm);
  if (*n < 1)
    return BadValue(g, absl::StrCat("at least 1 worker per node; ", kForm));
  if (*n > kMaxNprocPerNode) {
    return BadValue(
        g, absl::StrCat("at most ", kMaxNprocPerNode,
                        " workers per node; start more agents (nodes) for a "
                        "bigger job"));
  }
  return *n;
}

// -r / -t: "V" for every local rank, or "RANK:V,RANK:V". Zero entries are
// dropped: an empty map means "console only", so the agent needs no log
// directory for it.
absl::StatusOr<std::map<int, int>> ParseStdMap(const Given& g) {
  static constexpr char kForm[] =
      "expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both) for every local "
      "rank, or LOCAL_RANK:VALUE pairs, e.g. 0:3,1:1";
  std::map<int, int> out;
  absl::string_view text = absl::StripAsciiWhitespace(g.value);
  if (text.find(':') == absl::string_view::npos) {
    std::optional<int> v = ParseInt(text);
    if (!v.has_value() || *v < 0 || *v > 3) return BadValue(g, kForm);
    if (*v != 0) out[-1] = *v;
    return out;
  }
  for (absl::string_view item :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    if (kv.size() != 2) return BadValue(g, kForm);
    std::optional<int> rank = ParseInt(kv[0]);
    std::optional<int> v = ParseInt(kv[1]);
    if (!rank.has_value() || *rank < 0 || !v.has_value() || *v < 0 || *v > 3) {
      return BadValue(g, kForm);
    }
    if (*v != 0) {
      out[*rank] = *v;
    } else {
      out.erase(*rank);
    }
  }
  return out;
}

absl::StatusOr<std::set<int>> ParseRankList(const Given& g) {
  std::set<int> out;
  for (absl::string_view item :
       absl::StrSplit(g.value, ',', absl::SkipWhitespace())) {
    std::optional<int> r = ParseInt(item);
    if (!r.has_value() || *r < 0) {
      return BadValue(
          g, "expected local ranks separated by commas, e.g. 0 or 0,2");
    }
    out.insert(*r);
  }
  return out;
}

// torchrun's comma_separated_list: items split at ',', ",," is a literal
// comma, empty items are dropped ("" filters nothing).
std::vector<std::string> ParseFilterList(absl::string_view text) {
  std::vector<std::string> out;
  std::string item;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item.push_back(text[i]);
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item.push_back(',');
      ++i;
    } else {
      if (!item.empty()) out.push_back(std::move(item));
      item.clear();
    }
  }
  if (!item.empty()) out.push_back(std::move(item));
  return out;
}

// --signals-to-handle: names (SIGTERM, TERM, sigterm) or numbers.
absl::StatusOr<std::vector<int>> ParseSignalList(const Given& g) {
  static const std::pair<const char*, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT},
      {"TERM", SIGTERM}, {"USR1", SIGUSR1},   {"USR2", SIGUSR2},
      {"ALRM", SIGALRM}, {"PIPE", SIGPIPE},   {"CONT", SIGCONT},
      {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},
      {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},   {"VTALRM", SIGVTALRM},
      {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR},
      {"KILL", SIGKILL}, {"STOP", SIGSTOP}};
  std::vector<int> out;
  for (absl::string_view item :
       absl::StrSplit(g.value, ',', absl::SkipWhitespace())) {
    std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(item));
    int sig = 0;
    if (!absl::SimpleAtoi(name, &sig)) {
      absl::string_view bare = name;
      absl::ConsumePrefix(&bare, "SIG");
      for (const auto& [n, v] : kNames) {
        if (bare == n) sig = v;
      }
    }
    if (sig <= 0 || sig >= NSIG) {
      return BadValue(g, absl::StrCat("unknown signal '", item,
                                      "'; write names such as "
                                      "SIGTERM,SIGINT,SIGUSR1 or numbers"));
    }
    if (sig == SIGKILL || sig == SIGSTOP) {
      return BadValue(g, absl::StrCat(item,
                                      " cannot be caught by any process; "
                                      "leave it out"));
    }
    if (std::find(out.begin(), out.end(), sig) == out.end()) out.push_back(sig);
  }
  if (out.empty()) {
    return BadValue(g, "expected at least one signal, e.g. SIGTERM,SIGINT");
  }
  return out;
}

// --rdzv-conf, parsed into the config. is_host is returned separately: it
// decides the mode. Keys muster does not know (torchrun's use_libuv, a
// backend's own settings) are warnings: the same command line must run
// under both launchers.
absl::Status ParseRdzvConf(const Given& g, AgentConfig* config,
                           std::optional<bool>* is_host,
                           std::vector<std::string>* warnings,
                           std::string* token_file) {
  static constexpr char kKeys[] =
      "join_timeout (alias timeout), last_call_timeout, close_timeout, "
      "read_timeout, connect_timeout, reconnect_timeout, preflight_timeout, "
      "keep_alive_interval, lease_timeout, "
      "keep_alive_max_attempt, is_host, tls_ca, tls_cert, tls_key, "
      "token_file";
  bool lease_given = false;
  for (absl::string_view item :
       absl::StrSplit(g.value, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    std::string key =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(kv.first));
    absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (item.find('=') == absl::string_view::npos || key.empty()) {
      return BadValue(
          g, absl::StrCat("'", item,
                          "' is not KEY=VALUE; write e.g. join_timeout=900"));
    }
    if (key == "is_host") {
      std::optional<bool> b = ParseBool(value);
      if (!b.has_value()) {
        return BadValue(g, absl::StrCat("is_host=", value,
                                        ": expected true, false, 1 or 0"));
      }
      *is_host = b;
      continue;
    }
    // Security (docs/security.md): file paths, read and checked once the
    // whole command is parsed.
    if (key == "tls_ca" || key == "tls_cert" || key == "tls_key" ||
        key == "token_file") {
      if (value.empty()) {
        return BadValue(g, absl::StrCat(key, "= needs a file path"));
      }
      std::string* field = key == "tls_ca"     ? &config->security.tls_ca
                           : key == "tls_cert" ? &config->security.tls_cert
                           : key == "tls_key"  ? &config->security.tls_key
                                               : token_file;
      *field = std::string(value);
      continue;
    }
    if (key == "keep_alive_max_attempt") {
      std::optional<int> n = ParseInt(value);
      if (!n.has_value() || *n < 1 || *n > 1000) {
        return BadValue(
            g, absl::StrCat("keep_alive_max_attempt=", value,
                            ": expected a whole number of heartbeats from 1 to "
                            "1000"));
      }
      config->heartbeat_max_missed = *n;
      continue;
    }
    absl::Duration* target = nullptr;
    // A zero last call closes the round as soon as min nodes are in; a zero
    // close timeout ends it at once.
    bool zero_ok = false;
    // Every duration has sane bounds: a heartbeat every nanosecond (or once a
    // year) is a typo, not a setting. Default bounds: 10 ms .. 7 days.
    absl::Duration lo = absl::Milliseconds(10);
    absl::Duration hi = absl::Hours(24 * 7);
    if (key == "join_timeout" || key == "timeout") {
      target = &config->join_timeout;
    } else if (key == "last_call_timeout") {
      target = &config->last_call_timeout;
      zero_ok = true;
    } else if (key == "close_timeout") {
      target = &config->close_timeout;
      zero_ok = true;
    } else if (key == "read_timeout") {
      target = &config->read_timeout;
    } else if (key == "connect_timeout") {
      target = &config->connect_timeout;
    } else if (key == "reconnect_timeout") {
      target = &config->reconnect_timeout;
      zero_ok = true;
    } else if (key == "preflight_timeout") {
      target = &config->preflight_timeout;
    } else if (key == "lease_timeout") {
      // Lease fencing (docs/architecture.md): shorter than 1 s, a loaded
      // node loses its lease and restarts the round for nothing.
      target = &config->lease_timeout;
      lease_given = true;
      lo = absl::Seconds(1);
      hi = absl::Seconds(60);
    } else if (key == "keep_alive_interval") {
      hi = absl::Seconds(60);
      // torchrun's keep-alive is 5 s x 3 attempts: 15 s before a hung agent is
      // noticed. muster's defaults (0.25 s x 4, see AgentConfig) notice it in
      // about a second, which is what lets survivors leave a dead collective
      // quickly; the heartbeat is a tiny message on a stream that is open
      // anyway, so the faster rate costs nothing measurable. A user who asks
      // for torchrun's values still gets them.
      target = &config->heartbeat_interval;
    } else {
      std::string hint;
      for (absl::string_view known : absl::StrSplit(kKeys, ", ")) {
        known = known.substr(0, known.find(' '));
        if (EditDistance(key, known) <= 2) {
          hint = absl::StrCat(" (did you mean ", known, "?)");
          break;
        }
      }
      warnings->push_back(absl::StrCat(
          g.source, ": ignoring key '", key, "'", hint,
          ", which muster's rendezvous does not use; its keys are ", kKeys));
      continue;
    }
    std::optional<absl::Duration> d = ParseSeconds(value);
    if (!d.has_value() || (!zero_ok && *d == absl::ZeroDuration())) {
      return BadValue(g, absl::StrCat(key, "=", value, ": expected seconds ",
                                      zero_ok ? ">= 0" : "> 0", ", e.g. ", key,
                                      "=30 or ", key, "=0.5"));
    }
    if ((*d < lo && !(zero_ok && *d == absl::ZeroDuration())) || *d > hi) {
      return BadValue(
          g, absl::StrCat(key, "=", value, " is out of range: expected ",
                          zero_ok ? "0 or " : "", "seconds from ",
                          absl::FormatDuration(lo), " to ",
                          absl::FormatDuration(hi)));
    }
    *target = *d;
  }
  if (!lease_given) {
    // torchrun's keep_alive_interval=5 must still run: the default lease
    // grows to 4 heartbeats (within its bounds) instead of failing.
    config->lease_timeout = std::min(
        absl::Seconds(60),
        std::max(config->lease_timeout, config->heartbeat_interval * 4));
  }
  if (config->lease_timeout < config->heartbeat_interval * 4) {
    return BadValue(
        g, absl::StrCat(
               "lease_timeout=", absl::FormatDuration(config->lease_timeout),
               " is shorter than 4 heartbeats (keep_alive_interval=",
               absl::FormatDuration(config->heartbeat_interval),
               "): a lease must be renewed several times before it "
               "ends; raise lease_timeout or lower "
               "keep_alive_interval"));
  }
  return absl::OkStatus();
}

// A random job id for --standalone, formatted as torchrun's uuid4 so that tools
// that parse TORCHELASTIC_RUN_ID see the same shape.
std::string RandomRunId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  uint64_t hi = gen(), lo = gen();
  hi = (hi & ~uint64_t{0xF000}) | 0x4000;                      // version 4
  lo = (lo & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);  // variant 10
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", hi >> 32,
                         (hi >> 16) & 0xFFFF, hi & 0xFFFF, lo >> 48,
                         lo & 0xFFFFFFFFFFFFULL);
}

// The wildcard address of the family of `host`, with `port`.
std::string WildcardListen(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos)
    return absl::StrCat("[::]:", port);
  return absl::StrCat("0.0.0.0:", port);
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
    return absl::StrCat("Usage: ", kUsage, "\n\n", app->get_description());
  }
};

struct ParsedArgs {
  std::map<std::string, Given>
      values;  // by dash name, from the command line or PET_
  std::vector<std::string> program_args;
  bool show_help = false;
  bool show_version = false;
  std::string help_text;
};

const FlagSpec* FindFlag(absl::string_view name, bool is_short) {
  for (const FlagSpec& f : kFlags) {
    if (is_short ? name == f.short_name
                 : (name == f.name || name == Underscored(f.name))) {
      return &f;
    }
  }
  return nullptr;
}

// CLI11 reads `--flag=` (an empty value) as `--flag` and takes the next
// argument as its value, which would swallow the program's name. Such flags are
// rejected before CLI11 sees them, scanning the launcher's part of the command
// line as CLI11 does: it ends at `--` or at the first positional argument.
absl::Status RejectEmptyValues(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;
    if (a[1] == '-') {
      size_t eq = a.find('=');
      const FlagSpec* f = FindFlag(a.substr(2, eq == a.npos ? a.npos : eq - 2),
                                   /*is_short=*/false);
      if (f == nullptr || !f->takes_value) continue;
      if (eq == a.npos) {
        if (i + 1 == args.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--", f->name, ": expected a value (", f->value_name, ")"));
        }
        ++i;  // its value
      } else if (eq + 1 == a.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", f->name, "=: expected a value (", f->value_name, ")"));
      }
    } else if (a.size() == 2) {
      const FlagSpec* f = FindFlag(a.substr(1), /*is_short=*/true);
      if (f == nullptr || !f->takes_value) continue;
      if (i + 1 == args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            a, "/--", f->name, ": expected a value (", f->value_name, ")"));
      }
      ++i;  // its value
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedArgs> RunCli11(const std::vector<std::string>& args,
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

  std::map<std::string, CLI::Option*> options;
  const std::string version_help = "Print the version and exit.";
  for (const FlagSpec& f : kFlags) {
    std::string names =
        *f.short_name != '\0' ? absl::StrCat("-", f.short_name, ",") : "";
    absl::StrAppend(&names, "--", f.name);
    if (Underscored(f.name) != f.name)
      absl::StrAppend(&names, ",--", Underscored(f.name));
    // const: CLI11's add_flag(name, non-const string&) would bind the flag's
    // result to it.
    const std::string help =
        absl::StrCat(f.help, " [env ", EnvName(f.name), "]");
    CLI::Option* opt =
        f.takes_value ? app.add_option(names, help) : app.add_flag(names, help);
    if (f.takes_value) opt->type_name(f.value_name);
    opt->group(f.group);
    options[f.name] = opt;
  }
  CLI::Option* version = app.add_flag("--version", version_help);

  ParsedArgs out;
  out.help_text = app.help();
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

  for (const FlagSpec& f : kFlags) {
    CLI::Option* opt = options[f.name];
    if (opt->count() > 0 && !opt->results().empty()) {
      out.values[f.name] =
          Given{opt->results().back(), absl::StrCat("--", f.name)};
      continue;
    }
    // torchrun reads PET_<FLAG> as the flag's default. An empty variable counts
    // as unset: job templates often export every PET_ name, some of them empty.
    auto it = env.find(EnvName(f.name));
    if (it != env.end() && !it->second.empty()) {
      out.values[f.name] = Given{it->second, it->first};
    }
  }
  return out;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

int CountGpuDir(const char* dir, bool dev_names) {
  DIR* d = opendir(dir);
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (dev_names) {
      // /dev/nvidia0, /dev/nvidia1, ...; not nvidiactl, nvidia-uvm,
      // nvidia-caps.
      if (!absl::ConsumePrefix(&name, "nvidia") || name.empty() ||
          !std::all_of(name.begin(), name.end(),
                       [](char c) { return absl::ascii_isdigit(c); })) {
        continue;
      }
    }
    ++n;
  }
  closedir(d);
  return n;
}

}  // namespace

HostResources DetectHostResources(const Env& env) {
  HostResources h;
  cpu_set_t set;
  CPU_ZERO(&set);
  // The CPUs this process may use (taskset, cgroup cpusets), not all of the
  // machine's: a worker per CPU that it may not run on only oversubscribes the
  // ones it may.
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    h.cpus = CPU_COUNT(&set);
  } else {
    h.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  }
  h.cpus = std::max(1, h.cpus);

  // The driver lists one directory per GPU here; a container runtime shows only
  // the GPUs it passed in. Linking CUDA to count them would make the launcher
  // depend on a driver.
  int physical = CountGpuDir("/proc/driver/nvidia/gpus", /*dev_names=*/false);
  h.gpu_source = "/proc/driver/nvidia/gpus/";
  if (physical == 0) {
    physical = CountGpuDir("/dev", /*dev_names=*/true);
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

namespace {

absl::StatusOr<bool> FlagValue(const std::map<std::string, Given>& values,
                               const char* name) {
  auto it = values.find(name);
  if (it == values.end()) return false;
  std::optional<bool> b = ParseBool(it->second.value);
  if (!b.has_value())
    return BadValue(it->second, "expected 1 or 0 (true or false)");
  return *b;
}

// The settings that decide the mode, as given (nullopt / empty: not given).
struct ModeInputs {
  bool standalone = false;
  std::string backend;  // lower case
  std::optional<HostPort> endpoint;
  std::string endpoint_text;
  bool nnodes_given = false;
  std::optional<int> node_rank;
  std::string master_addr;
  std::optional<int> master_port;
  std::optional<bool> is_host;
  bool run_id_given = false;
};

void ResolveStandalone(const ModeInputs& in, AgentConfig* c) {
  c->mode = RendezvousMode::kStandalone;
  c->min_nodes = c->max_nodes = 1;
  c->node_rank = 0;
  c->embed_server = true;
  c->embed_if_local = false;
  c->embed_listen = "127.0.0.1:0";
  // The agent fills it in with the embedded server's address once it listens.
  c->rdzv_endpoint.clear();
  // --standalone: a fresh id per run, as torchrun's uuid. A single node without
  // --standalone keeps torchrun's "none" (TORCHELASTIC_RUN_ID=none): nothing
  // else shares its embedded server, and log directories get their own
  // suffix anyway.
  if (!in.run_id_given && in.standalone) c->run_id = RandomRunId();
}

absl::Status ResolveStatic(const ModeInputs& in, AgentConfig* c,
                           std::vector<std::string>* warnings) {
  c->mode = RendezvousMode::kStatic;
  if (c->min_nodes != c->max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", c->min_nodes, ":", c->max_nodes,
        ": static rendezvous needs a fixed node count; give --nnodes=N, or run "
        "an elastic job with --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT"));
  }
  const int nnodes = c->max_nodes;
  if (!in.node_rank.has_value()) {
    if (nnodes > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("static rendezvous with --nnodes=", nnodes,
                       " needs --node-rank=0..", nnodes - 1, " on each node"));
    }
    c->node_rank = 0;
  } else {
    c->node_rank = *in.node_rank;
  }
  // torchrun's static rendezvous lives at the endpoint when one is given: its
  // host stands in for --master-addr, so `--rdzv-backend=static
  // --rdzv-endpoint=node0:29400` works as there.
  if (!in.master_addr.empty()) {
    c->master_addr = in.master_addr;
    if (in.endpoint.has_value() && !in.endpoint->host.empty() &&
        in.endpoint->host != in.master_addr) {
      warnings->push_back(absl::StrCat(
          "static rendezvous: the server runs on node rank 0 (--master-addr=",
          in.master_addr, "); only the port of --rdzv-endpoint=",
          in.endpoint_text, " is used"));
    }
  } else if (in.endpoint.has_value() && !in.endpoint->host.empty()) {
    c->master_addr = in.endpoint->host;
  } else {
    c->master_addr = "127.0.0.1";
    if (nnodes > 1) {
      warnings->push_back(
          absl::StrCat("static rendezvous with --nnodes=", nnodes,
                       " and no --master-addr: using 127.0.0.1, which reaches "
                       "node rank 0 only when every node runs on this machine; "
                       "give --master-addr=<address of node rank 0>"));
    }
  }
  c->master_port = in.master_port.value_or(kDefaultMasterPort);
  const int rdzv_port =
      in.endpoint.has_value() ? in.endpoint->port : kDefaultRdzvPort;
  if (rdzv_port == c->master_port) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--master-port=", c->master_port,
        ": that is also the rendezvous server's port on node rank 0, and the "
        "workers' store needs its own; pick another --master-port, or move the "
        "server with --rdzv-endpoint=:PORT"));
  }
  c->rdzv_endpoint = HostPort{c->master_addr, rdzv_port}.ToString();
  c->embed_server = c->node_rank == 0;
  c->embed_if_local = false;
  c->embed_listen =
      c->embed_server ? WildcardListen(c->master_addr, rdzv_port) : "";
  return absl::OkStatus();
}

absl::Status ResolveDynamic(const ModeInputs& in, AgentConfig* c,
                            std::vector<std::string>* warnings) {
  c->mode = RendezvousMode::kDynamic;
  if (in.endpoint->host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-endpoint=", in.endpoint_text,
                     ": needs the host of the rendezvous server, e.g. "
                     "--rdzv-endpoint=node0:29400"));
  }
  c->rdzv_endpoint = in.endpoint->ToString();
  const std::string listen =
      WildcardListen(in.endpoint->host, in.endpoint->port);
  if (in.is_host.has_value()) {
    c->embed_server = *in.is_host;
    c->embed_if_local = false;
    c->embed_listen = *in.is_host ? listen : "";
  } else {
    // torchrun guesses is_host from the endpoint naming this machine; the agent
    // decides at start-up, when it can also see whether a musterd already
    // listens there.
    c->embed_server = false;
    c->embed_if_local = true;
    c->embed_listen = listen;
  }
  // With a server, ranks are assigned by join order; --node-rank only says
  // where this node would like to be.
  c->node_rank = in.node_rank.value_or(-1);
  if (!in.master_addr.empty() || in.master_port.has_value()) {
    warnings->push_back(
        "--master-addr/--master-port apply to static rendezvous only; with "
        "--rdzv-endpoint the round's group rank 0 chooses MASTER_ADDR and "
        "MASTER_PORT, so they are ignored");
  }
  if (!in.run_id_given) {
    warnings->push_back(
        "no --rdzv-id: this job is \"none\" on the rendezvous server, and jobs "
        "that share a server need distinct ids; give --rdzv-id=JOB on every "
        "node");
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchCommand> Parse(
    const std::vector<std::string>& args, const Env& env,
    const std::function<HostResources()>& host) {
  MUSTER_ASSIGN_OR_RETURN(ParsedArgs parsed, RunCli11(args, env));
  LaunchCommand cmd;
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

  const std::map<std::string, Given>& v = parsed.values;
  auto get = [&v](const char* name) -> const Given* {
    auto it = v.find(name);
    return it == v.end() ? nullptr : &it->second;
  };
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  AgentConfig& c = cmd.config;
  std::vector<std::string>& warnings = cmd.warnings;
  ModeInputs in;

  // --- nodes and workers
  if (const Given* g = get("nnodes")) {
    MUSTER_RETURN_IF_ERROR(ParseNnodes(*g, &c.min_nodes, &c.max_nodes));
    in.nnodes_given = true;
  }
  if (const Given* g = get("nproc-per-node")) {
    MUSTER_ASSIGN_OR_RETURN(c.nproc_per_node, ParseNproc(*g, host));
  }
  if (const Given* g = get("node-rank")) {
    MUSTER_ASSIGN_OR_RETURN(
        in.node_rank, IntInRange(*g, 0, kMaxInt, "expected a node rank >= 0"));
  }
  if (const Given* g = get("max-restarts")) {
    MUSTER_ASSIGN_OR_RETURN(
        c.max_restarts,
        IntInRange(*g, 0, kMaxInt, "expected a number of restarts >= 0"));
  }
  if (const Given* g = get("monitor-interval")) {
    std::optional<absl::Duration> d = ParseSeconds(g->value);
    if (!d.has_value() || *d < absl::Milliseconds(1) || *d > absl::Hours(1)) {
      return BadValue(*g, "expected seconds from 0.001 to 3600, e.g. 0.1 or 5");
    }
    c.monitor_interval = *d;
  }
  MUSTER_ASSIGN_OR_RETURN(bool no_preflight, FlagValue(v, "no-preflight"));
  c.preflight = !no_preflight;
  if (const Given* g = get("health-port")) {
    MUSTER_ASSIGN_OR_RETURN(
        c.health_port, IntInRange(*g, 0, 65535, "expected a port 0..65535"));
  }
  if (const Given* g = get("worker-timeout")) {
    std::optional<absl::Duration> d = ParseSeconds(g->value);
    if (!d.has_value() || *d < absl::ZeroDuration()) {
      return BadValue(*g, "expected seconds >= 0 (0 turns the watchdog off)");
    }
    c.worker_timeout = *d;
  }
  if (const Given* g = get("role")) {
    if (absl::StripAsciiWhitespace(g->value).empty())
      return BadValue(*g, "expected a role name");
    c.role = g->value;
  }
  if (const Given* g = get("start-method")) {
    std::string m = absl::AsciiStrToLower(g->value);
    if (m != "spawn" && m != "fork" && m != "forkserver") {
      return BadValue(*g, "expected spawn, fork or forkserver");
    }
    if (m != "spawn") {
      // Python's multiprocessing start methods do not apply to a launcher
      // that execs the program: every worker is a fresh process, as spawn.
      warnings.push_back(absl::StrCat(
          g->source, "=", g->value,
          " has no effect: muster starts every worker as a fresh process "
          "(fork and exec, like spawn)"));
    }
  }
  // torchrun reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT when the flag is absent.
  Given shutdown_env;
  const Given* shutdown = get("shutdown-timeout");
  if (shutdown == nullptr) {
    auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    if (it != env.end() && !it->second.empty()) {
      shutdown_env = Given{it->second, it->first};
      shutdown = &shutdown_env;
    }
  }
  if (shutdown != nullptr) {
    std::optional<absl::Duration> d = ParseSeconds(shutdown->value);
    if (!d.has_value() || *d < absl::ZeroDuration()) {
      return BadValue(*shutdown,
                      "expected seconds >= 0, e.g. 30 (0 kills at once)");
    }
    c.stop_grace = *d;
  }
  if (const Given* g = get("signals-to-handle")) {
    MUSTER_ASSIGN_OR_RETURN(c.signals_to_handle, ParseSignalList(*g));
  }
  if (const Given* g = get("numa-binding")) {
    std::string m = absl::AsciiStrToLower(absl::StripAsciiWhitespace(g->value));
    if (m != "node" && m != "socket" && m != "exclusive" &&
        m != "core-complex") {
      return BadValue(*g, "expected node, socket, exclusive or core-complex");
    }
    c.numa_binding = m;
  }
  MUSTER_ASSIGN_OR_RETURN(c.virtual_local_rank,
                          FlagValue(v, "virtual-local-rank"));
  if (const Given* g = get("event-log-handler")) {
    std::string h = absl::AsciiStrToLower(absl::StripAsciiWhitespace(g->value));
    if (h == "dynamic_rendezvous") h = "null";  // torchrun's logs nothing too
    if (h != "null" && h != "console") {
      return BadValue(*g,
                      "expected null or console (torchrun's registered "
                      "handlers; muster cannot load others)");
    }
    c.event_log_handler = h;
  }
  if (const Given* g = get("local-addr")) c.local_addr = g->value;

  // --- rendezvous
  MUSTER_ASSIGN_OR_RETURN(in.standalone, FlagValue(v, "standalone"));
  if (const Given* g = get("rdzv-backend")) {
    in.backend = absl::AsciiStrToLower(absl::StripAsciiWhitespace(g->value));
    if (in.backend == "etcd" || in.backend == "etcd-v2") {
      warnings.push_back(absl::StrCat(
          g->source, "=", g->value,
          ": muster has no etcd backend; --rdzv-endpoint is taken as the "
          "address of a muster rendezvous server (musterd), not of etcd"));
    } else if (in.backend != "c10d" && in.backend != "static" &&
               in.backend != "muster") {
      return BadValue(*g,
                      "expected c10d, static or muster (etcd and etcd-v2 are "
                      "accepted and mean muster's server)");
    }
  }
  if (const Given* g = get("rdzv-endpoint")) {
    in.endpoint_text = g->value;
    absl::StatusOr<HostPort> hp = ParseHostPort(g->value, kDefaultRdzvPort);
    if (!hp.ok()) {
      return BadValue(*g,
                      absl::StrCat(hp.status().message(),
                                   "; write HOST[:PORT], e.g. node0:29400"));
    }
    in.endpoint = *hp;
  }
  if (const Given* g = get("rdzv-id")) {
    absl::string_view id = g->value;
    // The id names a log directory (<log-dir>/<run id>/): keep it a single path
    // component.
    if (id.empty() || id == "." || id == ".." ||
        id.find('/') != absl::string_view::npos ||
        id.find('\\') != absl::string_view::npos) {
      return BadValue(
          *g, "expected a job id without '/' or '\\', e.g. --rdzv-id=job-42");
    }
    c.run_id = g->value;
    in.run_id_given = true;
  }
  if (const Given* g = get("rdzv-conf")) {
    std::string token_file;
    MUSTER_RETURN_IF_ERROR(
        ParseRdzvConf(*g, &c, &in.is_host, &warnings, &token_file));
    MUSTER_RETURN_IF_ERROR(
        Annotate(c.security.Validate(), "--rdzv-conf (PET_RDZV_CONF)"));
    if (!token_file.empty()) {
      absl::StatusOr<std::string> token = rendezvous::ReadTokenFile(token_file);
      if (!token.ok()) {
        return Annotate(token.status(), "--rdzv-conf token_file");
      }
      c.security.token = *std::move(token);
    }
  }
  if (c.security.token.empty()) {
    auto token = env.find(rendezvous::kRdzvTokenEnv);
    if (token != env.end() && !token->second.empty()) {
      MUSTER_ASSIGN_OR_RETURN(
          c.security.token,
          rendezvous::CleanToken(token->second, rendezvous::kRdzvTokenEnv));
    }
  }
  if (const Given* g = get("master-addr")) {
    absl::string_view addr = absl::StripAsciiWhitespace(g->value);
    if (addr.empty()) return BadValue(*g, "expected a host name or address");
    // One colon is a port (an IPv6 address has several): a common slip that
    // would otherwise surface as a resolver error on every worker.
    if (std::count(addr.begin(), addr.end(), ':') == 1) {
      return BadValue(*g,
                      "give the host alone and the port with --master-port, "
                      "e.g. --master-addr=node0 --master-port=29500");
    }
    in.master_addr = std::string(addr);
  }
  if (const Given* g = get("master-port")) {
    MUSTER_ASSIGN_OR_RETURN(
        in.master_port,
        IntInRange(*g, 1, 65535, "expected a port number in 1..65535"));
  }

  // --- output
  if (const Given* g = get("log-dir")) c.log_dir = g->value;
  if (const Given* g = get("redirects")) {
    MUSTER_ASSIGN_OR_RETURN(c.redirects, ParseStdMap(*g));
  }
  if (const Given* g = get("tee")) {
    MUSTER_ASSIGN_OR_RETURN(c.tees, ParseStdMap(*g));
  }
  if (const Given* g = get("local-ranks-filter")) {
    MUSTER_ASSIGN_OR_RETURN(c.local_ranks_filter, ParseRankList(*g));
  }
  if (const Given* g = get("duplicate-stdout-filters")) {
    c.duplicate_stdout_filters = ParseFilterList(g->value);
  }
  if (const Given* g = get("duplicate-stderr-filters")) {
    c.duplicate_stderr_filters = ParseFilterList(g->value);
  }
  if (const Given* g = get("logs-specs");
      g != nullptr &&
      !absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(g->value),
                              "default") &&
      !absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(g->value),
                              "DefaultLogsSpecs")) {
    // torchrun's own default plugin is what muster does: accepted. Any other
    // plugin is Python code muster cannot run.
    return BadValue(
        *g,
        "muster cannot load torchrun.logs_specs entry points (Python "
        "plugins); leave --logs-specs out: muster's logs follow torchrun's "
        "DefaultLogsSpecs (--log-dir, -r, -t, --local-ranks-filter, "
        "--duplicate-stdout-filters, --duplicate-stderr-filters)");
  }
  // Settings for local ranks that will not exist are harmless but probably a
  // mistake (e.g. --nproc-per-node changed and -r was not).
  auto warn_absent_ranks = [&](const char* flag, const std::map<int, int>& m) {
    for (const auto& entry : m) {
      if (entry.first >= c.nproc_per_node) {
        warnings.push_back(absl::StrCat(
            "--", flag, ": local rank ", entry.first,
            " does not exist with --nproc-per-node=", c.nproc_per_node,
            "; its setting has no effect"));
      }
    }
  };
  warn_absent_ranks("redirects", c.redirects);
  warn_absent_ranks("tee", c.tees);
  for (int rank : c.local_ranks_filter) {
    if (rank >= c.nproc_per_node) {
      warnings.push_back(absl::StrCat("--local-ranks-filter: local rank ", rank,
                                      " does not exist with --nproc-per-node=",
                                      c.nproc_per_node, "; it shows nothing"));
    }
  }

  // torchrun writes filtered_*.log from the teed streams only.
  if ((!c.duplicate_stdout_filters.empty() ||
       !c.duplicate_stderr_filters.empty()) &&
      c.tees.empty()) {
    warnings.push_back(
        "--duplicate-stdout-filters/--duplicate-stderr-filters copy lines of "
        "teed streams only (as torchrun); nothing is teed, so nothing is "
        "copied: add -t 3 (or 1, 2)");
  }
  if (c.virtual_local_rank) {
    // As torchrun: local rank k sees entry k of CUDA_VISIBLE_DEVICES.
    auto cvd = env.find("CUDA_VISIBLE_DEVICES");
    if (cvd != env.end()) {
      std::vector<absl::string_view> devices = absl::StrSplit(cvd->second, ',');
      if (c.nproc_per_node > static_cast<int>(devices.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--virtual-local-rank with --nproc-per-node=", c.nproc_per_node,
            " gives each local rank one entry of CUDA_VISIBLE_DEVICES=",
            cvd->second, ", which has ", devices.size(),
            "; list a device per worker or start fewer workers"));
      }
    }
  }

  // --- mode
  const bool dynamic_backend =
      !in.backend.empty() && in.backend != "static";  // c10d, muster, etcd*
  if (in.standalone) {
    if (in.nnodes_given && (c.min_nodes != 1 || c.max_nodes != 1)) {
      warnings.push_back(
          absl::StrCat("--standalone runs one node; ignoring --nnodes=",
                       get("nnodes")->value));
    }
    if (in.endpoint.has_value()) {
      warnings.push_back(
          absl::StrCat("--standalone starts its own rendezvous server; "
                       "ignoring --rdzv-endpoint=",
                       in.endpoint_text));
    }
    if (in.backend == "static") {
      warnings.push_back(
          "--standalone starts its own rendezvous server; ignoring "
          "--rdzv-backend=static");
    }
    if (!in.master_addr.empty() || in.master_port.has_value()) {
      warnings.push_back(
          "--master-addr/--master-port apply to static rendezvous only; with "
          "--standalone they are ignored");
    }
    if (in.node_rank.value_or(0) != 0) {
      warnings.push_back(absl::StrCat(
          "--standalone runs one node; ignoring --node-rank=", *in.node_rank));
    }
    ResolveStandalone(in, &c);
  } else {
    if (in.node_rank.has_value() && *in.node_rank >= c.max_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--node-rank=", *in.node_rank, ": with --nnodes=",
                       c.min_nodes == c.max_nodes
                           ? absl::StrCat(c.max_nodes)
                           : absl::StrCat(c.min_nodes, ":", c.max_nodes),
                       " node ranks are 0..", c.max_nodes - 1));
    }
    const bool master_given =
        !in.master_addr.empty() || in.master_port.has_value();
    // With no backend named, --master-addr and a fixed node count mean static
    // even when --rdzv-endpoint is given (static is torchrun's default
    // backend): the endpoint then only moves the server's port.
    const bool static_by_master = in.backend.empty() &&
                                  !in.master_addr.empty() &&
                                  c.min_nodes == c.max_nodes;
    if (in.backend == "static" || static_by_master) {
      MUSTER_RETURN_IF_ERROR(ResolveStatic(in, &c, &warnings));
    } else if (in.endpoint.has_value()) {
      MUSTER_RETURN_IF_ERROR(ResolveDynamic(in, &c, &warnings));
    } else if (c.max_nodes == 1 && !master_given) {
      // One node and nothing pinned: an embedded server on a free port, so that
      // two single-node jobs on one machine do not both want port 29400
      // ("Address already in use").
      ResolveStandalone(in, &c);
    } else if (dynamic_backend) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-backend=", in.backend,
                       " needs --rdzv-endpoint=HOST[:PORT] (the rendezvous "
                       "server, port 29400 by default)"));
    } else if (c.min_nodes != c.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nnodes=", c.min_nodes, ":", c.max_nodes,
          " is elastic and needs a rendezvous server: add "
          "--rdzv-endpoint=HOST:PORT and --rdzv-id=JOB (HOST may be one of the "
          "nodes, which then runs the server), or give a fixed --nnodes=N with "
          "--node-rank and --master-addr"));
    } else {
      MUSTER_RETURN_IF_ERROR(ResolveStatic(in, &c, &warnings));
    }
  }

  // --- program
  if (parsed.program_args.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no training program given: ", kUsage));
  }
  MUSTER_ASSIGN_OR_RETURN(bool module, FlagValue(v, "module"));
  MUSTER_ASSIGN_OR_RETURN(bool no_python, FlagValue(v, "no-python"));
  MUSTER_ASSIGN_OR_RETURN(bool run_path, FlagValue(v, "run-path"));
  if (module && no_python) {
    return absl::InvalidArgumentError(
        "-m/--module runs PROGRAM as a Python module and --no-python runs it "
        "without Python; give one of them");
  }
  if (run_path && no_python) {
    return absl::InvalidArgumentError(
        "--run-path runs PROGRAM with Python and --no-python runs it without; "
        "give one of them");
  }
  if (run_path && module) {
    return absl::InvalidArgumentError(
        "--run-path runs PROGRAM as a script file and -m/--module as a module; "
        "give one of them");
  }
  // The interpreter: --python (or PET_PYTHON), then torchrun's PYTHON_EXEC,
  // then python3 from PATH (torchrun's own interpreter is sys.executable; the
  // closest a launcher that is no Python program can come is what `python3`
  // means here, resolved once at start-up: see ResolvePythonInterpreter).
  auto py = env.find("PYTHON_EXEC");
  const bool python_exec_set = py != env.end() && !py->second.empty();
  std::string python = "python3";
  c.python_source = "python3 from PATH";
  if (const Given* g = get("python")) {
    if (absl::StripAsciiWhitespace(g->value).empty()) {
      return BadValue(*g, "expected the path of a Python interpreter");
    }
    python = g->value;
    c.python_source = g->source;
    if (python_exec_set && py->second != g->value) {
      warnings.push_back(absl::StrCat(g->source, "=", g->value,
                                      " wins over PYTHON_EXEC=", py->second));
    }
  } else if (python_exec_set) {
    python = py->second;
    c.python_source = "PYTHON_EXEC";
  }
  const std::vector<std::string>& prog = parsed.program_args;
  // torchrun runs any path through Python unless --no-python; muster also
  // runs programs directly, so a path is run through Python when it ends in
  // .py or is a file that cannot be executed (a script without its run bit
  // or its extension).
  auto is_plain_file = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           access(path.c_str(), X_OK) != 0;
  };
  if (module) {
    c.program = {python, "-u", "-m"};
  } else if (!no_python &&
             (run_path || absl::EndsWithIgnoreCase(prog.front(), ".py") ||
              is_plain_file(prog.front()))) {
    // -u: unbuffered, so that worker lines reach the console (and the agent's
    // rank prefixes) as they are printed, not when a buffer fills.
    c.program = {python, "-u"};
  }
  if (!c.program.empty()) {
    c.python_interpreter = python;
  } else {
    c.python_source.clear();
  }
  c.program.insert(c.program.end(), prog.begin(), prog.end());
  return cmd;
}

}  // namespace

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
        absl::StrCat("no training program given: ", kUsage));
  }
  const std::string& exe = config.program.front();
  if (exe.find('/') != std::string::npos) {
    struct stat st {};
    if (stat(exe.c_str(), &st) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(exe, ": no such file"));
    }
    if (!IsExecutableFile(exe)) {
      return absl::InvalidArgumentError(
          absl::StrCat(exe,
                       ": not an executable file (chmod +x it, or run it "
                       "through its interpreter)"));
    }
  } else {
    auto path_it = env.find("PATH");
    const std::string path =
        path_it != env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin";
    bool found = false;
    for (absl::string_view dir : absl::StrSplit(path, ':')) {
      if (IsExecutableFile(absl::StrCat(dir.empty() ? "." : dir, "/", exe))) {
        found = true;
        break;
      }
    }
    if (!found) {
      std::string hint;
      if (IsExecutableFile(exe)) {
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
  // A script run through Python: [python, -u, script, ...] (not [python, -u,
  // -m, module]).
  if (config.program.size() > 2 && config.program[1] == "-u" &&
      config.program[2] != "-m") {
    const std::string& script = config.program[2];
    struct stat st {};
    if (stat(script.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(script, ": no such file"));
    }
  }
  return absl::OkStatus();
}

}  // namespace muster::cli
