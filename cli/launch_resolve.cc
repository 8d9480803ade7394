#include "cli/launch_resolve.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "muster/common/status.h"
#include "muster/platform/launch_os.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/defaults.h"

namespace muster::cli {

namespace os = platform::os;
namespace {

using agent::AgentConfig;
using agent::RendezvousMode;

// musterd's port, which is also torchrun's c10d default.
constexpr int kDefaultRdzvPort = 29400;
// torchrun's default MASTER_PORT in static mode.
constexpr int kDefaultMasterPort = 29500;

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

void ResolveStandalone(const LaunchSettings& in, AgentConfig* c) {
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

absl::Status ResolveStatic(const LaunchSettings& in, AgentConfig* c,
                           std::vector<std::string>* warnings) {
  c->mode = RendezvousMode::kStatic;
  if (in.replicas.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-endpoint=", in.endpoint_text,
        ": static rendezvous runs its server on node rank 0, so it takes one "
        "endpoint; for musterd replicas use --rdzv-backend=c10d with "
        "--nnodes=MIN:MAX and --rdzv-id=JOB"));
  }
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
  if (rdzv_port == 0 && nnodes > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-endpoint=", in.endpoint_text,
        ": port 0 gives node rank 0's server a free port that the other ",
        nnodes - 1, " node(s) cannot know; give a port, e.g. :29400"));
  }
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

void WarnDynamicFlags(const LaunchSettings& in,
                      std::vector<std::string>* warnings);

// --rdzv-endpoint=H1:P1,H2:P2: musterd replicas. The agent always
// joins (no is_host guess: a replica is a musterd of its own), and unless
// lease_timeout is given its lease is kDefaultReplicatedLease, long enough
// to outlast a leader's replacement (defaults.h; docs/architecture.md,
// "Following the leader").
absl::Status ResolveReplicas(const LaunchSettings& in, AgentConfig* c,
                             std::vector<std::string>* warnings) {
  if (in.is_host.value_or(false)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-endpoint=", in.endpoint_text,
        " lists musterd replicas, which an agent cannot host: drop "
        "is_host=true from --rdzv-conf, or give one endpoint"));
  }
  c->rdzv_endpoint = JoinHostPorts(in.replicas);
  c->embed_server = false;
  c->embed_if_local = false;
  c->embed_listen.clear();
  if (!in.lease_given) {
    c->lease_timeout =
        std::max(c->lease_timeout, rendezvous::kDefaultReplicatedLease);
  }
  c->node_rank = in.node_rank.value_or(-1);
  WarnDynamicFlags(in, warnings);
  return absl::OkStatus();
}

absl::Status ResolveDynamic(const LaunchSettings& in, AgentConfig* c,
                            std::vector<std::string>* warnings) {
  c->mode = RendezvousMode::kDynamic;
  if (in.endpoint->host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-endpoint=", in.endpoint_text,
                     ": needs the host of the rendezvous server, e.g. "
                     "--rdzv-endpoint=node0:29400"));
  }
  if (in.replicas.size() > 1) return ResolveReplicas(in, c, warnings);
  c->rdzv_endpoint = in.endpoint->ToString();
  // A name with several addresses is several replicas (the agent counts
  // them when it starts).
  c->replicated_lease_default = !in.lease_given;
  const std::string listen =
      WildcardListen(in.endpoint->host, in.endpoint->port);
  // Port 0 (as torchrun's c10d backend takes it): the server this node
  // embeds listens on a free port. Only an agent that hosts the server can
  // know that port; whether HOST is this machine is decided at start
  // (agent/src/embedded_rendezvous.cc).
  if (in.endpoint->port == 0 && in.is_host == false) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-endpoint=", in.endpoint_text,
        ": port 0 means \"the server this node starts, on a free port\", and "
        "rdzv-conf is_host=false says this node starts none; give the "
        "server's port"));
  }
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
  WarnDynamicFlags(in, warnings);
  return absl::OkStatus();
}

void WarnDynamicFlags(const LaunchSettings& in,
                      std::vector<std::string>* warnings) {
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
}

// --standalone, with warnings for the flags it makes meaningless.
void ResolveStandaloneFlag(LaunchSettings* s) {
  const AgentConfig& c = s->config;
  std::vector<std::string>& warnings = s->warnings;
  if (s->nnodes_given && (c.min_nodes != 1 || c.max_nodes != 1)) {
    warnings.push_back(absl::StrCat(
        "--standalone runs one node; ignoring --nnodes=", s->nnodes_text));
  }
  if (s->endpoint.has_value()) {
    warnings.push_back(
        absl::StrCat("--standalone starts its own rendezvous server; "
                     "ignoring --rdzv-endpoint=",
                     s->endpoint_text));
  }
  if (s->backend == "static") {
    warnings.push_back(
        "--standalone starts its own rendezvous server; ignoring "
        "--rdzv-backend=static");
  }
  if (!s->master_addr.empty() || s->master_port.has_value()) {
    warnings.push_back(
        "--master-addr/--master-port apply to static rendezvous only; with "
        "--standalone they are ignored");
  }
  if (s->node_rank.value_or(0) != 0) {
    warnings.push_back(absl::StrCat(
        "--standalone runs one node; ignoring --node-rank=", *s->node_rank));
  }
  ResolveStandalone(*s, &s->config);
}

}  // namespace

absl::Status ResolveTokenFromEnv(const Env& env, LaunchSettings* s) {
  if (!s->config.security.token.empty()) return absl::OkStatus();
  auto token = env.find(store::kRdzvTokenEnv);
  if (token != env.end() && !token->second.empty()) {
    MUSTER_ASSIGN_OR_RETURN(
        s->config.security.token,
        rendezvous::CleanToken(token->second, store::kRdzvTokenEnv));
  }
  return absl::OkStatus();
}

absl::Status CheckWorkerSettings(const Env& env, LaunchSettings* s) {
  const AgentConfig& c = s->config;
  std::vector<std::string>& warnings = s->warnings;
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
  // Under --recovery=restart a replaced node would cost every other node its
  // processes too: the very stop a spare is there to avoid.
  if (c.straggler_action == agent::StragglerAction::kReplace &&
      c.recovery != agent::Recovery::kInPlace) {
    return absl::InvalidArgumentError(
        "--straggler-action=replace needs --recovery=in-place, so that the "
        "other nodes keep their processes while a spare takes the "
        "straggler's place: add --recovery=in-place, or give "
        "--straggler-action=exclude or report");
  }
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
  return absl::OkStatus();
}

absl::Status ResolveMode(LaunchSettings* s) {
  AgentConfig& c = s->config;
  if (s->standalone) {
    ResolveStandaloneFlag(s);
    return absl::OkStatus();
  }
  if (s->node_rank.has_value() && *s->node_rank >= c.max_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-rank=", *s->node_rank, ": with --nnodes=",
                     c.min_nodes == c.max_nodes
                         ? absl::StrCat(c.max_nodes)
                         : absl::StrCat(c.min_nodes, ":", c.max_nodes),
                     " node ranks are 0..", c.max_nodes - 1));
  }
  const bool dynamic_backend =
      !s->backend.empty() && s->backend != "static";  // c10d, muster, etcd*
  const bool master_given =
      !s->master_addr.empty() || s->master_port.has_value();
  // With no backend named, --master-addr and a fixed node count mean static
  // even when --rdzv-endpoint is given (static is torchrun's default
  // backend): the endpoint then only moves the server's port.
  const bool static_by_master = s->backend.empty() && !s->master_addr.empty() &&
                                c.min_nodes == c.max_nodes;
  if (s->backend == "static" || static_by_master) {
    return ResolveStatic(*s, &c, &s->warnings);
  }
  if (s->endpoint.has_value()) return ResolveDynamic(*s, &c, &s->warnings);
  if (c.max_nodes == 1 && !master_given) {
    // One node and nothing pinned: an embedded server on a free port, so that
    // two single-node jobs on one machine do not both want port 29400
    // ("Address already in use").
    ResolveStandalone(*s, &c);
    return absl::OkStatus();
  }
  if (dynamic_backend) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-backend=", s->backend,
                     " needs --rdzv-endpoint=HOST[:PORT] (the rendezvous "
                     "server, port 29400 by default)"));
  }
  if (c.min_nodes != c.max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", c.min_nodes, ":", c.max_nodes,
        " is elastic and needs a rendezvous server: add "
        "--rdzv-endpoint=HOST:PORT and --rdzv-id=JOB (HOST may be one of the "
        "nodes, which then runs the server), or give a fixed --nnodes=N with "
        "--node-rank and --master-addr"));
  }
  return ResolveStatic(*s, &c, &s->warnings);
}

// --run-path, as torchrun's run_script_path: the script runs through
// runpy.run_path as __main__ with sys.argv = [SCRIPT, ARGS...], inside
// torchelastic's record() when torch is there (an exception writes the error
// file, as in torchrun's worker wrapper). The script's module namespace is
// dropped when it returns, so what it holds (process groups, stores) is freed
// while the interpreter is whole; then the process ends as torchrun's worker
// processes do, without the interpreter's finalisation: atexit handlers run
// and every stream (Python's and C's stdio) is flushed, then os._exit. Under
// `python SCRIPT`, torch 1.13 aborts about one exit in 40 in finalisation
// ("terminate called without an active exception") after the work is done.
// sys.path[0] is the script's directory, as under `python SCRIPT`.
constexpr char kRunPathBootstrap[] =
    "import atexit, os, runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "def _muster_run_path():\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "try:\n"
    "    from torch.distributed.elastic.multiprocessing.errors import record\n"
    "    _muster_run_path = record(_muster_run_path)\n"
    "except ImportError:\n"
    "    pass\n"
    "def _muster_flush():\n"
    "    for f in (sys.stdout, sys.stderr):\n"
    "        try:\n"
    "            f.flush()\n"
    "        except Exception:\n"
    "            pass\n"
    "    try:\n"
    "        import ctypes\n"
    "        ctypes.CDLL(None).fflush(None)\n"
    "    except Exception:\n"
    "        pass\n"
    "code = 0\n"
    "try:\n"
    "    _muster_run_path()\n"
    "except SystemExit as e:\n"
    "    if e.code is None:\n"
    "        code = 0\n"
    "    elif isinstance(e.code, int):\n"
    "        code = e.code\n"
    "    else:\n"
    "        print(e.code, file=sys.stderr)\n"
    "        code = 1\n"
    "except BaseException:\n"
    "    import traceback\n"
    "    traceback.print_exc()\n"
    "    code = 1\n"
    "try:\n"
    "    atexit._run_exitfuncs()\n"
    "finally:\n"
    "    _muster_flush()\n"
    "    os._exit(code & 0xff)\n";

absl::Status ResolveProgram(const std::vector<std::string>& prog,
                            const Env& env, LaunchSettings* s) {
  AgentConfig& c = s->config;
  if (s->module && s->no_python) {
    return absl::InvalidArgumentError(
        "-m/--module runs PROGRAM as a Python module and --no-python runs it "
        "without Python; give one of them");
  }
  if (s->run_path && s->no_python) {
    return absl::InvalidArgumentError(
        "--run-path runs PROGRAM with Python and --no-python runs it without; "
        "give one of them");
  }
  if (s->run_path && s->module) {
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
  std::string python = os::kDefaultPython;
  c.python_source = absl::StrCat(os::kDefaultPython, " from PATH");
  if (s->python.has_value()) {
    const Given& g = *s->python;
    if (absl::StripAsciiWhitespace(g.value).empty()) {
      return BadValue(g, "expected the path of a Python interpreter");
    }
    python = g.value;
    c.python_source = g.source;
    if (python_exec_set && py->second != g.value) {
      s->warnings.push_back(absl::StrCat(
          g.source, "=", g.value, " wins over PYTHON_EXEC=", py->second));
    }
  } else if (python_exec_set) {
    python = py->second;
    c.python_source = "PYTHON_EXEC";
  }
  // torchrun runs any path through Python unless --no-python; muster also
  // runs programs directly, so a path is run through Python when it ends in
  // .py or is a file that cannot be executed (a script without its run bit
  // or its extension).
  if (s->module) {
    c.program = {python, "-u", "-m"};
  } else if (s->run_path) {
    c.program = {python, "-u", "-c", kRunPathBootstrap};
  } else if (!s->no_python &&
             (s->run_path || absl::EndsWithIgnoreCase(prog.front(), ".py") ||
              os::StatPath(prog.front()) == os::PathKind::kPlainFile)) {
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
  return absl::OkStatus();
}

}  // namespace muster::cli
