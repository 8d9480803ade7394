// musterd: the muster rendezvous server (Session streams, the Store service,
// grpc.health.v1).
//
// clang-format off
//   musterd [--config=FILE] [--listen=HOST:PORT] [--port-file=PATH]
//           [--heartbeat-timeout=2s] [--log-level=info]
//           [--tls-cert=PEM --tls-key=PEM [--tls-client-ca=PEM]]
//           [--require-token] [--admin-token-file=FILE]
// clang-format on
//
// Security (docs/security.md): TLS on the gRPC port, mTLS with
// --tls-client-ca; jobs bound to their token; SIGHUP re-reads the TLS files
// without dropping a job.
//
// --config reads the same settings from a file of `key = value` lines whose
// keys are the long flag names (deploy/systemd/musterd.conf); the command line
// wins over the file.
//
// Under systemd (Type=notify, deploy/systemd/musterd.service) it tells the
// service manager through $NOTIFY_SOCKET: READY=1 once it listens, STATUS=
// lines (the address, then jobs and agents), WATCHDOG=1 at half of
// WatchdogSec= while the rendezvous state answers, and STOPPING=1 on
// SIGTERM/SIGINT. Without $NOTIFY_SOCKET none of that happens.
//
// On Windows (docs/windows.md) it runs as a service when the service control
// manager starts it: SERVICE_RUNNING once it listens, and the manager's
// STOP/SHUTDOWN drain it as SIGTERM does. `musterd --install-service
// [--service-name=musterd] [musterd flags...]` registers it with those flags,
// `--uninstall-service [--service-name=...]` removes it (on Linux both say to
// use the systemd unit in deploy/systemd).
//
// Exit codes: 0 after SIGTERM/SIGINT and a clean shutdown; 1 when it cannot
// serve (the port is taken, the address is not on this host) or a service
// cannot be installed or removed; 2 for bad flags or a bad config file.
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cli/musterd_host.h"
#include "cli/musterd_replica_flags.h"
#include "muster/common/duration.h"
#include "muster/common/logging.h"
#include "muster/platform/env.h"
#include "muster/platform/event_log.h"
#include "muster/platform/files.h"
#include "muster/platform/host.h"
#include "muster/platform/service_host.h"
#include "muster/platform/signals.h"
#include "muster/platform/stop_requests.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/server.h"

namespace {

#ifdef MUSTER_VERSION
constexpr char kVersion[] = MUSTER_VERSION;
#else
constexpr char kVersion[] = "0.1.0";
#endif

// The event source of the Windows Application log (the MSI registers it).
constexpr char kEventSource[] = "muster";
constexpr int kExitCannotServe = 1;
constexpr int kExitUsage = 2;
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);

// gRPC's own log lines go through our logger at debug level: musterd reports
// the failures that matter itself, in its own words (a taken port, for one, is
// otherwise also logged by gRPC).
void GrpcLogToMuster(gpr_log_func_args* args) {
  MUSTER_LOG(DEBUG) << "grpc: " << args->file << ":" << args->line << ": "
                    << args->message;
}

// The port file replaces PATH with a new file, so it may only be absent or a
// regular file: as root, replacing /dev/full or a FIFO someone reads from
// destroys it (platform::WriteFileAtomically refuses anything else).
absl::Status WritePortFile(const std::string& path, int port) {
  return muster::platform::WriteFileAtomically(path, absl::StrCat(port, "\n"));
}

// --install-service: registers this executable with `args` (the command line
// less the install flag) as the service `name`, started at boot.
int InstallService(const std::string& name,
                   const std::vector<std::string>& args) {
  const std::vector<std::string> relative =
      muster::cli::RelativePathFlags(args, [](const std::string& p) {
        return std::filesystem::path(p).is_absolute();
      });
  if (!relative.empty()) {
    std::cerr << "musterd: --install-service: " << relative.front()
              << " is a relative path, and a service starts in another "
                 "directory (%SystemRoot%\\system32); give absolute paths\n";
    return kExitUsage;
  }
  muster::platform::ServiceInstall spec;
  spec.name = name;
  spec.display_name = absl::StrCat("muster rendezvous server (", name, ")");
  spec.description =
      "musterd: the rendezvous server and key-value store of muster jobs";
  spec.args = muster::cli::ServiceArguments(args, name);
  if (absl::Status s = muster::platform::InstallService(spec); !s.ok()) {
    std::cerr << "musterd: " << s.message() << "\n";
    return kExitCannotServe;
  }
  std::cout << "musterd: installed the service '" << name
            << "' (starts at boot); start it now with `sc start " << name
            << "` or `net start " << name
            << "`, and open its port in the firewall (docs/windows.md)\n";
  return 0;
}

int UninstallService(const std::string& name) {
  if (absl::Status s = muster::platform::UninstallService(name); !s.ok()) {
    std::cerr << "musterd: " << s.message() << "\n";
    return kExitCannotServe;
  }
  std::cout << "musterd: removed the service '" << name << "'\n";
  return 0;
}

// Every setting of musterd, as the flags (and --config) give it.
struct MusterdFlags {
  std::string listen = "0.0.0.0:29400";
  std::string port_file;
  std::string http_listen;
  std::string heartbeat_timeout;
  std::string state_dir;
  std::string log_level;
  std::string log_file;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool require_token = false;
  std::string admin_token_file;
  bool metrics_admin_only = false;
  muster::store::KvStoreLimits store_limits;
  int session_queues = 0;
  muster::cli::ReplicaFlags replica;
  bool install_service = false;
  bool uninstall_service = false;
  std::string service_name = "musterd";
};

// One flag: its name, its help, and how it binds to its field (with its
// checks). Captureless lambdas, so the table below is plain data.
struct MusterdFlag {
  const char* name;
  const char* help;
  void (*add)(CLI::App& app, const char* name, const char* help,
              MusterdFlags* f);
};

// A Store limit, in bytes or keys, from 1 to `max`.
CLI::Option* AddLimit(CLI::App& app, const char* name, const char* help,
                      int64_t* field, int64_t max) {
  return app.add_option(name, *field, help)
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, max));
}

// musterd's flags, in --help's order (the launcher's are
// cli/launch_flag_table.cc).
// clang-format off
const MusterdFlag kMusterdFlags[] = {
    {"--listen", "HOST:PORT to listen on; port 0 picks a free port",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->listen, h)->capture_default_str(); }},
    {"--http-listen", "HOST:PORT for /healthz, /readyz, /metrics (Prometheus) and the console API /api/v1/ (docs/console.md); off unless given",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->http_listen, h); }},
    {"--port-file", "write the bound port to this file once serving (useful with port 0)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->port_file, h); }},
    {"--heartbeat-timeout", "declare an agent lost after this long without a heartbeat, for agents "
                            "that do not set their own (e.g. 2s, 500ms; default 2s)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->heartbeat_timeout, h); }},
    {"--state-dir", "journal jobs, rounds and Store keys in DIR (one file, replaced atomically) "
                    "and resume them when musterd restarts; agents re-announce their rounds either way",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->state_dir, h)->type_name("DIR"); }},
    {"--store-max-key-bytes", "the longest Store key, in bytes",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       AddLimit(a, n, h, &f->store_limits.max_key_bytes, int64_t{1} << 20); }},
    {"--store-max-value-bytes", "the largest Store value, in bytes",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       AddLimit(a, n, h, &f->store_limits.max_value_bytes, int64_t{1} << 30); }},
    {"--store-max-keys", "the most Store keys one job's round may hold",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       AddLimit(a, n, h, &f->store_limits.max_namespace_keys, int64_t{1} << 30); }},
    {"--store-max-bytes", "the most Store bytes (keys and values) one job's round may hold; a "
                          "write past a limit fails with RESOURCE_EXHAUSTED",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       AddLimit(a, n, h, &f->store_limits.max_namespace_bytes, int64_t{1} << 40); }},
    {"--session-queues", "completion queues (a thread each) that carry the agents' Session streams; "
                         "more spread the per-event cost of many agents (0: the default, 128 on "
                         "Linux, whose gRPC's per-event cost grows with a queue's streams; one per "
                         "core, 2 to 16, on Windows)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->session_queues, h)->check(CLI::Range(0, 256)); }},
    {"--log-level", "debug, info, warning or error (default: $MUSTER_LOG_LEVEL, else info)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->log_level, h)->check(CLI::IsMember(
           {"debug", "info", "warning", "error"}, CLI::ignore_case)); }},
    {"--tls-cert", "serve TLS with this PEM certificate (chain); with --tls-key. SIGHUP re-reads it",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->tls_cert, h)->type_name("PEM"); }},
    {"--tls-key", "the PEM private key of --tls-cert",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->tls_key, h)->type_name("PEM"); }},
    {"--tls-client-ca", "require client certificates signed by this PEM CA (mTLS)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->tls_client_ca, h)->type_name("PEM"); }},
    {"--require-token", "refuse jobs without a token (agents send MUSTER_RDZV_TOKEN or rdzv-conf "
                        "token_file)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_flag(n, f->require_token, h); }},
    {"--admin-token-file", "a token that may see every job's status (muster status --token-file)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->admin_token_file, h)->type_name("FILE"); }},
    {"--metrics-admin-only", "/metrics answers only with the admin token (Authorization: Bearer); "
                             "it names every job",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_flag(n, f->metrics_admin_only, h); }},
    {"--log-file", "append the log to FILE as well as stderr (a Windows service has no console)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->log_file, h)->type_name("FILE"); }},
    // The replica flags (--etcd-endpoints...) are a table of their own.
    {"", "",
     [](CLI::App& a, const char*, const char*, MusterdFlags* f) {
       muster::cli::AddReplicaFlags(a, &f->replica); }},
    {"--install-service", "register musterd, with the other flags given, as the Windows service "
                          "--service-name (started at boot), then exit",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_flag(n, f->install_service, h); }},
    {"--uninstall-service", "stop and remove the Windows service --service-name, then exit",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_flag(n, f->uninstall_service, h); }},
    {"--service-name", "the Windows service's name (with --install-service, --uninstall-service, "
                       "and when the service manager runs it)",
     [](CLI::App& a, const char* n, const char* h, MusterdFlags* f) {
       a.add_option(n, f->service_name, h)->capture_default_str(); }},
};
// clang-format on

// Parses the command line (and --config) into *flags. Returns the exit code
// when musterd should exit now (help, the version, a bad flag), else -1.
int ParseMusterdFlags(int argc, char** argv, MusterdFlags* flags) {
  CLI::App app{
      "musterd: the muster rendezvous server. Agents (`muster "
      "--rdzv-endpoint=HOST:PORT`) hold a "
      "session with it; workers bootstrap through its key-value store.",
      "musterd"};
  app.set_config("--config", "",
                 "read settings from FILE: `key = value` lines, keys are the "
                 "long flag names (listen, http-listen, heartbeat-timeout, "
                 "log-level, port-file); the command line wins")
      ->type_name("FILE");
  // A misspelt key is an error, not a silently ignored setting.
  app.allow_config_extras(CLI::config_extras_mode::error);
  for (const MusterdFlag& flag : kMusterdFlags) {
    flag.add(app, flag.name, flag.help, flags);
  }
  app.set_version_flag("--version", absl::StrCat("musterd ", kVersion,
                                                 " (protocol muster.v1, gRPC ",
                                                 grpc::Version(), ")"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, the version, or the error
    return code == 0 ? 0 : kExitUsage;
  }
  if (flags->install_service && flags->uninstall_service) {
    std::cerr << "musterd: --install-service and --uninstall-service exclude "
                 "each other; give one\n";
    return kExitUsage;
  }
  return -1;
}

// The log's file and level, and gRPC's log through ours. Returns an exit code
// when the log file cannot be opened, else -1.
int SetUpLogging(const MusterdFlags& flags) {
  // A Windows service also reports its start, stop, errors and failed jobs
  // to the Application log (EventKindOf picks them); elsewhere there is none.
  std::shared_ptr<muster::platform::EventLog> events;
  if (muster::platform::ServiceHost::Default()->managed()) {
    events = muster::platform::EventLog::Open(kEventSource);
  }
  if (!flags.log_file.empty() || events != nullptr) {
    if (absl::Status s = muster::cli::LogTo(flags.log_file, events); !s.ok()) {
      std::cerr << "musterd: " << s.message() << "\n";
      if (events != nullptr) {
        events->Report(muster::platform::EventKind::kError,
                       absl::StrCat("musterd did not start: ", s.message()));
      }
      return kExitUsage;
    }
  }
  if (!flags.log_level.empty()) {
    std::string level = absl::AsciiStrToLower(flags.log_level);
    muster::SetMinLogLevel(level == "debug"     ? muster::LogLevel::kDebug
                           : level == "warning" ? muster::LogLevel::kWarning
                           : level == "error"   ? muster::LogLevel::kError
                                                : muster::LogLevel::kInfo);
  }
  gpr_set_log_function(GrpcLogToMuster);
  // Debian's Abseil is built without NDEBUG, so absl::Mutex runs its deadlock
  // detector (a graph of every mutex ever held together) on each lock: with
  // 10,000 Session streams that was over a third of musterd's CPU time. Tests
  // keep it on; the daemon does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return -1;
}

// The server's options from the flags. Errors: INVALID_ARGUMENT with the
// message to print (musterd then exits with kExitUsage).
absl::StatusOr<muster::rendezvous::ServerOptions> ServerOptionsFrom(
    const MusterdFlags& flags) {
  if (!flags.port_file.empty()) {
    if (std::string what =
            muster::platform::DescribeNonRegularFile(flags.port_file);
        !what.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--port-file=", flags.port_file, " is ", what,
          "; give a path that does not exist or is a regular file"));
    }
  }
  muster::rendezvous::ServerOptions options;
  options.listen = flags.listen;
  options.store_limits = flags.store_limits;
  options.http_listen = flags.http_listen;
  options.tls.cert = flags.tls_cert;
  options.tls.key = flags.tls_key;
  options.tls.client_ca = flags.tls_client_ca;
  options.require_token = flags.require_token;
  options.metrics_admin_only = flags.metrics_admin_only;
  if (!flags.admin_token_file.empty()) {
    absl::StatusOr<std::string> admin =
        muster::rendezvous::ReadTokenFile(flags.admin_token_file);
    if (!admin.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin-token-file: ", admin.status().message()));
    }
    options.admin_token = *std::move(admin);
  }
  options.state_dir = flags.state_dir;
  options.session_queues = flags.session_queues;
  if (absl::Status s = muster::cli::ResolveReplicaFlags(
          flags.replica, flags.state_dir, &options.replica);
      !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  if (!flags.heartbeat_timeout.empty()) {
    // "2s", "500ms", "1m30s", or a plain number of seconds ("2", "0.5").
    absl::StatusOr<absl::Duration> d =
        muster::ParseDuration(flags.heartbeat_timeout);
    if (!d.ok() || *d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--heartbeat-timeout: '", flags.heartbeat_timeout,
          "' is not a positive duration (examples: 2s, 500ms, 1.5)"));
    }
    options.coordinator.default_heartbeat_timeout = *d;
  }
  return options;
}

// What a server that others can reach risks, said once at start-up.
void WarnWhenExposed(const muster::rendezvous::ServerOptions& options) {
  const bool tls = options.tls.enabled();
  const bool token = options.require_token;
  if (tls && token) return;
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  if (host == "127.0.0.1" || host == "localhost" || host == "[::1]") return;
  MUSTER_LOG(WARNING) << "musterd serves other hosts "
                      << (tls ? "" : "in plaintext (no --tls-cert) ")
                      << (token ? "" : "and accepts jobs without a token ")
                      << "— anyone who reaches this port can "
                      << (tls ? "" : "read tokens on the wire, ")
                      << (token ? "" : "join and read token-less jobs")
                      << "; see docs/security.md";
}

// SIGHUP: the TLS files read again.
void ReloadTls(muster::rendezvous::RendezvousServer* serving, bool tls) {
  if (!tls) {
    MUSTER_LOG(INFO) << "musterd: SIGHUP: no TLS files to reload";
    return;
  }
  absl::Status reloaded = serving->ReloadTls();
  if (reloaded.ok()) {
    MUSTER_LOG(INFO) << "musterd: SIGHUP: TLS certificate and key reloaded; "
                        "new connections use them, sessions go on";
  } else {
    MUSTER_LOG(ERROR) << "musterd: SIGHUP: TLS reload failed, keeping the "
                         "previous certificates: "
                      << reloaded.message();
  }
}

// musterd holds one descriptor per agent's connection: the OS's usual soft
// limit of 1,024 would refuse the 1,000th agent with EMFILE, logged by gRPC
// far from any hint. Raised to the hard limit, as servers do; a hard limit
// too low for a large job is named with the fix at start-up.
void RaiseDescriptorLimit() {
  constexpr int64_t kLargeJob = 65536;
  const muster::platform::OpenFileLimit limit =
      muster::platform::RaiseOpenFileLimit();
  if (limit.now < 0) return;  // no such limit (Windows)
  if (limit.now != limit.before) {
    MUSTER_LOG(INFO) << "musterd: open-file limit raised from " << limit.before
                     << " to " << limit.now << " (one per agent connection)";
  }
  if (limit.now < kLargeJob) {
    // Information, not a warning: most jobs are far smaller.
    MUSTER_LOG(INFO) << "musterd: open-file limit " << limit.now
                     << " (its hard limit): room for about that many agents "
                        "at once; for larger jobs raise it (LimitNOFILE= in "
                        "the systemd unit, `ulimit -Hn` where musterd starts, "
                        "or the container runtime's nofile limit)";
  }
}

// Serves with `options` until SIGTERM/SIGINT; returns the exit code.
int Serve(const muster::rendezvous::ServerOptions& options,
          const std::string& port_file) {
  // SIGINT/SIGTERM are taken by the wait below, never by a handler. Blocked
  // before any thread starts, so every gRPC thread inherits the mask. SIGHUP
  // reloads the TLS files.
  muster::platform::StopRequests stop_requests(
      {muster::platform::kSignalInterrupt, muster::platform::kSignalTerminate,
       muster::platform::kSignalHangup});
  muster::platform::IgnoreBrokenPipes();
  RaiseDescriptorLimit();

  auto server = muster::rendezvous::RendezvousServer::Start(options);
  if (!server.ok()) {
    MUSTER_LOG(ERROR) << server.status().message();
    muster::platform::ServiceHost::Default()->SetStatus(
        absl::StrCat("cannot serve: ", server.status().message()));
    // UNIMPLEMENTED: a feature this build lacks (--http-listen in a Windows
    // build whose dependency prefix had no civetweb).
    return server.status().code() == absl::StatusCode::kInvalidArgument ||
                   server.status().code() == absl::StatusCode::kUnimplemented
               ? kExitUsage
               : kExitCannotServe;
  }
  const muster::store::ServerTls& tls = options.tls;
  MUSTER_LOG(INFO) << "musterd listening on " << (*server)->address()
                   << (tls.enabled()
                           ? (tls.client_ca.empty() ? " (TLS)" : " (mTLS)")
                           : " (plaintext)")
                   << (options.require_token ? ", job tokens required" : "");
  WarnWhenExposed(options);
  if ((*server)->http_port() != 0) {
    MUSTER_LOG(INFO)
        << "musterd serving /healthz, /readyz, /metrics, /api/v1/ on port "
        << (*server)->http_port()
        << (tls.enabled() ? " (HTTPS, with --tls-cert's certificate)"
                          : " (HTTP)");
  }
  if (!port_file.empty()) {
    if (absl::Status s = WritePortFile(port_file, (*server)->port()); !s.ok()) {
      MUSTER_LOG(ERROR) << "--port-file: " << s.message();
      (*server)->Shutdown(kShutdownGrace);
      return kExitCannotServe;
    }
  }
  muster::rendezvous::RendezvousServer* const serving = server->get();
  muster::cli::ServiceNotifier notifier(
      muster::platform::ServiceHost::Default(), [serving] {
        auto& coordinator = serving->coordinator();
        return absl::StrCat("serving on ", serving->address(), ": ",
                            coordinator.JobCount(), " job(s), ",
                            coordinator.ConnectedAgents(), " agent(s)");
      });

  const int sig = muster::cli::WaitForStop(
      stop_requests, [&] { ReloadTls(serving, tls.enabled()); });
  const char* signal_name =
      sig == muster::platform::kSignalTerminate ? "SIGTERM" : "SIGINT";
  MUSTER_LOG(INFO) << "musterd: " << signal_name << ", shutting down";
  notifier.Stop();
  muster::platform::ServiceHost::Default()->Stopping(
      absl::StrCat("shutting down (", signal_name, ")"));
  (*server)->Shutdown(kShutdownGrace);
  MUSTER_LOG(INFO) << "musterd stopped";
  return 0;
}

// musterd itself: flags, then serving until a stop request.
int MusterdMain(int argc, char** argv) {
  muster::SetLogTag("musterd");
  MusterdFlags flags;
  if (int rc = ParseMusterdFlags(argc, argv, &flags); rc >= 0) {
    // A service's bad flag or config key was said on a stderr nobody reads.
    std::unique_ptr<muster::platform::EventLog> events;
    if (rc != 0 && muster::platform::ServiceHost::Default()->managed() &&
        (events = muster::platform::EventLog::Open(kEventSource)) != nullptr) {
      events->Report(
          muster::platform::EventKind::kError,
          "musterd did not start: a bad flag or --config file (exit 2); run "
          "the service's command line in a console to see which");
    }
    return rc;
  }
  if (flags.install_service) {
    return InstallService(flags.service_name,
                          std::vector<std::string>(argv + 1, argv + argc));
  }
  if (flags.uninstall_service) return UninstallService(flags.service_name);
  if (int rc = SetUpLogging(flags); rc >= 0) return rc;
  absl::StatusOr<muster::rendezvous::ServerOptions> options =
      ServerOptionsFrom(flags);
  if (!options.ok()) {
    std::cerr << "musterd: " << options.status().message() << "\n";
    return kExitUsage;
  }
  return Serve(*options, flags.port_file);
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else (no thread yet): glibc's malloc on huge pages, by an
  // exec with its tunable set (see host.h). A round of 100,000 agents formed
  // in 14 s instead of 24-28 s.
  muster::platform::UseHugePagesForMalloc(argv);
  // Under the Windows service control manager musterd runs as the service
  // named by its --service-name (the install puts it there); everywhere else
  // MusterdMain just runs.
  return muster::platform::RunService(
      muster::cli::ServiceNameFromArgs(
          std::vector<std::string>(argv + 1, argv + argc)),
      [argc, argv] { return MusterdMain(argc, argv); });
}
