// AgentConfig: everything the elastic agent needs, resolved from torchrun's
// flags by cli/launch_flags (which validates it once; the agent trusts it).
#ifndef MUSTER_AGENT_CONFIG_H_
#define MUSTER_AGENT_CONFIG_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "muster/rendezvous/defaults.h"
#include "muster/store/security.h"

namespace muster::agent {

enum class RendezvousMode {
  kStandalone,  // --standalone: embedded server on 127.0.0.1, ephemeral port
  kStatic,   // --nnodes=N --node-rank=K --master-addr: node rank 0 embeds the
             // server
  kDynamic,  // --rdzv-endpoint to a musterd (embedded when is_host)
};

// --recovery: what a round's end costs the workers that still run.
enum class Recovery {
  kRestart,  // every agent stops its workers and starts new ones
  kInPlace,  // workers that opened the control channel are kept
             // (docs/architecture.md, "Control channel")
};

// --straggler-action: what musterd does with a rank the others wait for
// (docs/architecture.md, "Stragglers").
enum class StragglerAction {
  kReport,   // name it in `muster status`, the log and the metrics; no more
  kReplace,  // swap its node for a waiting spare (needs --recovery=in-place,
             // so that the other nodes keep their processes)
  kExclude,  // drop its node while the job keeps its minimum node count
};

struct AgentConfig {
  RendezvousMode mode = RendezvousMode::kStandalone;

  // --- job
  // --rdzv-id: the job id on the server (TORCHELASTIC_RUN_ID); torchrun's
  // default is "none".
  std::string run_id = "none";
  // --nnodes=MIN[:MAX].
  int min_nodes = 1;
  int max_nodes = 1;
  // --nproc-per-node, resolved to a number (auto/cpu/gpu already counted).
  int nproc_per_node = 1;
  // --role.
  std::string role = "default";
  // --max-restarts.
  int max_restarts = 0;
  // --recovery (PET_RECOVERY).
  Recovery recovery = Recovery::kRestart;
  // --monitor-interval: how often worker state is checked when nothing else
  // wakes the agent.
  absl::Duration monitor_interval = absl::Milliseconds(100);

  // --- rendezvous
  // HOST:PORT of the server to join (in standalone mode filled in with the
  // embedded one), or musterd replicas "H1:P1,H2:P2": the agent then joins
  // the leader and follows it (rendezvous/src/client/replica_client.cc), never
  // embeds a server, and gives the workers the whole list in
  // MUSTER_STORE_ENDPOINT.
  std::string rdzv_endpoint;
  // Whether this agent starts the server itself (standalone; static node rank
  // 0; is_host=1).
  bool embed_server = false;
  // Dynamic mode without is_host: embed the server when the endpoint names this
  // host and nothing listens there yet (torchrun's is_host guess); join as a
  // client if another agent won the race.
  bool embed_if_local = false;
  // Where the embedded server listens ("127.0.0.1:0" in standalone mode).
  std::string embed_listen;
  // --node-rank, or -1.
  int node_rank = -1;
  // --master-addr / --master-port: static mode's MASTER_ADDR/MASTER_PORT for
  // the workers (empty / -1: chosen by the round's group rank 0).
  std::string master_addr;
  int master_port = -1;
  // --local-addr: the address this node advertises (empty: detected).
  std::string local_addr;
  // --rdzv-conf values.
  absl::Duration join_timeout = rendezvous::kDefaultJoinTimeout;
  absl::Duration last_call_timeout = rendezvous::kDefaultLastCallTimeout;
  absl::Duration close_timeout = absl::Seconds(30);
  absl::Duration read_timeout = absl::Seconds(60);
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration heartbeat_interval = absl::Milliseconds(250);
  // Set when the user gave keep_alive_interval: the agent then keeps
  // heartbeat_interval. Otherwise it follows the interval musterd suggests
  // (its heartbeat budget, muster/rendezvous/heartbeat_budget.h), never
  // shorter than heartbeat_interval nor longer than lease_timeout/4.
  bool heartbeat_interval_fixed = false;
  int heartbeat_max_missed = 4;  // keep_alive_max_attempt
  // rdzv-conf lease_timeout (1 s .. 60 s, at least 4 heartbeats): the agent
  // stops its workers when musterd has not renewed its lease for about 0.7 of
  // this, before musterd could declare the node lost and start a round
  // without it (agent/src/lease_fence.h). musterd waits a full lease before
  // it declares a silent node lost, so this also bounds how long survivors
  // wait for a node cut off by the network. The launcher makes it
  // kDefaultReplicatedLease (10 s) when --rdzv-endpoint lists several musterd
  // replicas and lease_timeout is not given: the fence must outlast a
  // leader's replacement (docs/architecture.md, "Following the leader").
  absl::Duration lease_timeout = rendezvous::kDefaultLease;
  // Set by the launcher when lease_timeout was not given: an endpoint that
  // turns out to name several replicas at start-up (a name with several
  // addresses, e.g. a Kubernetes headless Service) raises lease_timeout to
  // kDefaultReplicatedLease too, as a list does.
  bool replicated_lease_default = false;
  // How long the agent keeps trying to get its session back after losing the
  // server (a network blip, musterd restarted by systemd) before it stops its
  // workers and gives up. The workers keep running meanwhile: they need the
  // server only between rounds. rdzv-conf reconnect_timeout.
  absl::Duration reconnect_timeout = absl::Seconds(10);
  // TLS (rdzv-conf tls_ca, tls_cert, tls_key) and the job token
  // (MUSTER_RDZV_TOKEN or rdzv-conf token_file), read once by launch_flags.
  // The token goes to musterd on every call and never to a worker: workers
  // get their round's Store credential instead (MUSTER_STORE_TOKEN).
  store::ClientSecurity security = {};

  // --- workers
  // The program and its arguments, ready to exec: ["/usr/bin/python3", "-u",
  // "train.py", ...] or ["./train.exe", ...].
  std::vector<std::string> program;
  // Preflight (on unless --no-preflight): when a round forms, probe some peers
  // on their reserved ports before starting the workers; a blocked peer fails
  // the job naming both nodes.
  bool preflight = true;
  // How long one preflight probe waits for an answer (rdzv-conf
  // preflight_timeout).
  absl::Duration preflight_timeout = absl::Seconds(2);
  // --health-port: serve /healthz, /readyz and /metrics for this node over HTTP
  // (-1: off; 0 picks a port and logs it).
  int health_port = -1;
  // --worker-timeout: a worker whose progress file (MUSTER_PROGRESS_FILE) shows
  // no progress for this long is killed and reported as hung. Zero: no
  // watchdog.
  absl::Duration worker_timeout = absl::ZeroDuration();
  // --straggler-action, --straggler-threshold, --straggler-window and
  // --exclude-cooldown: the job's straggler policy, sent in the Join. musterd
  // scores each rank's speed against the median over the window; under the
  // threshold a rank is a straggler, and its node may be excluded (this agent
  // then exits kExitExcluded) and kept out of the job for the cooldown.
  StragglerAction straggler_action = StragglerAction::kReport;
  double straggler_threshold = 0.7;
  absl::Duration straggler_window = absl::Seconds(20);
  absl::Duration exclude_cooldown = absl::Minutes(10);
  // --exclude-after-failures: musterd excludes a node whose workers failed
  // this many rounds in a row (0: never), as a straggler for the cooldown.
  int exclude_after_failures = 0;
  // --health-check: a shell command run before each round's join; a failure
  // or a hang past health_check_timeout keeps this node out (exit 4,
  // agent/src/health_check.h). Empty: none.
  std::string health_check;
  absl::Duration health_check_timeout = absl::Seconds(60);
  // --shutdown-timeout: how long stopping workers waits after SIGTERM (or the
  // forwarded signal) before SIGKILL. torchrun's default, 30 s
  // (TORCH_ELASTIC_SHUTDOWN_TIMEOUT when set): a worker that saves a
  // checkpoint on SIGTERM gets the time it got under torchrun.
  absl::Duration stop_grace = absl::Seconds(30);
  // --signals-to-handle: signals the launcher takes, forwards to the workers
  // and then stops the job on (exit 128+signal). Signals not listed keep their
  // default action. torchrun's default list.
  std::vector<int> signals_to_handle = {15 /*SIGTERM*/, 2 /*SIGINT*/,
                                        1 /*SIGHUP*/, 3 /*SIGQUIT*/};
  // --numa-binding: "", "node", "socket", "exclusive" or "core-complex". Each
  // worker is bound to CPUs near the GPU of its local rank
  // (agent/src/numa_binding.h).
  std::string numa_binding;
  // --virtual-local-rank: every worker sees LOCAL_RANK=0 and only its own GPU
  // (CUDA_VISIBLE_DEVICES narrowed to the local rank's entry).
  bool virtual_local_rank = false;
  // --event-log-handler: "null" (default) or "console" (torchelastic events
  // as JSON lines on stderr). "dynamic_rendezvous" is torchrun's name for a
  // handler that logs nothing; it is kept as "null".
  std::string event_log_handler = "null";

  // --- the Python interpreter (when PROGRAM runs through Python)
  // What runs the workers, resolved at start-up (a pyenv shim becomes the
  // interpreter it would run); empty when PROGRAM is not run through Python.
  std::string python_interpreter;
  // Where that interpreter came from, for the failure summary: "--python",
  // "PYTHON_EXEC" or "python3 from PATH".
  std::string python_source;

  // --- output
  // --log-dir: base directory of worker logs and error files (empty: a
  // temporary directory).
  std::string log_dir;
  // -r / -t, per local rank (key -1 = all ranks); values are StdStreams bits.
  std::map<int, int> redirects;
  std::map<int, int> tees;
  // --local-ranks-filter (empty = all).
  std::set<int> local_ranks_filter;
  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (or "[rank${rank}]:" with
  // --prefix-output): the console prefix of teed lines, ${rank},
  // ${local_rank}, ${role_name}, ${hostname} expanded. Empty: torchrun's
  // "[<role><local rank>]:".
  std::string log_line_prefix_template;
  // --prefix-output: every console line carries the prefix, teed or not
  // (torchrun prefixes teed lines only).
  bool prefix_output = false;
  // --duplicate-stdout-filters / --duplicate-stderr-filters: lines of teed
  // streams that contain any of these go also to
  // attempt_<n>/filtered_{stdout,stderr}.log.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_CONFIG_H_
