// musterd: the muster rendezvous server (Session streams, the Store service,
// grpc.health.v1).
//
//   musterd [--config=FILE] [--listen=HOST:PORT] [--port-file=PATH]
//   [--heartbeat-timeout=2s] [--log-level=info]
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
// Exit codes: 0 after SIGTERM/SIGINT and a clean shutdown; 1 when it cannot
// serve (the port is taken, the address is not on this host); 2 for bad flags
// or a bad config file.
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "muster/common/logging.h"
#include "muster/rendezvous/server.h"

namespace {

#ifdef MUSTER_VERSION
constexpr char kVersion[] = MUSTER_VERSION;
#else
constexpr char kVersion[] = "0.1.0";
#endif

constexpr int kExitCannotServe = 1;
constexpr int kExitUsage = 2;
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);

// "2s", "500ms", "1m30s", or a plain number of seconds ("2", "0.5").
bool ParseDurationFlag(const std::string& text, absl::Duration* out) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    *out = absl::Seconds(seconds);
    return true;
  }
  return absl::ParseDuration(text, out);
}

// gRPC's own log lines go through our logger at debug level: musterd reports
// the failures that matter itself, in its own words (a taken port, for one, is
// otherwise also logged by gRPC).
void GrpcLogToMuster(gpr_log_func_args* args) {
  MUSTER_LOG(DEBUG) << "grpc: " << args->file << ":" << args->line << ": "
                    << args->message;
}

// Writes the port to path atomically (a reader never sees a partial file).
bool WritePortFile(const std::string& path, int port, std::string* error) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << port << "\n";
    f.close();
    if (!f) {
      *error = absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno));
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = absl::StrCat("cannot rename ", tmp, " to ", path, ": ",
                          std::strerror(errno));
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

// Talks to systemd (sd_notify) while musterd serves: STATUS= when the numbers
// change, WATCHDOG=1 at half of the watchdog interval systemd asked for. Each
// ping first asks the Coordinator for its counters, which takes its lock: a
// musterd whose rendezvous state is stuck stops pinging and systemd restarts
// it. Does nothing when musterd does not run under a service manager (no
// $NOTIFY_SOCKET). Stop() before the server goes away.
class SystemdNotifier {
 public:
  SystemdNotifier(muster::rendezvous::RendezvousServer* server,
                  std::string address)
      : server_(server), address_(std::move(address)) {
    const char* socket = getenv("NOTIFY_SOCKET");
    if (socket == nullptr || *socket == '\0') return;
    uint64_t usec = 0;
    // > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is ours.
    if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0) {
      period_ = absl::Microseconds(usec) / 2;
      watchdog_ = true;
      MUSTER_LOG(INFO) << "systemd watchdog: " << absl::Microseconds(usec)
                       << ", pinging every " << period_;
    }
    sd_notifyf(0, "READY=1\nSTATUS=%s", StatusLine().c_str());
    thread_ = std::thread([this] { Run(); });
  }
  ~SystemdNotifier() { Stop(); }

  // Ends the pings. Idempotent.
  void Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string StatusLine() {
    auto& coordinator = server_->coordinator();
    return absl::StrCat("serving on ", address_, ": ", coordinator.JobCount(),
                        " job(s), ", coordinator.ConnectedAgents(),
                        " agent(s)");
  }

  void Run() {
    std::string last_status;
    while (!stop_.WaitForNotificationWithTimeout(period_)) {
      std::string status = StatusLine();
      std::string message;
      if (watchdog_) message = "WATCHDOG=1\n";
      if (status != last_status) absl::StrAppend(&message, "STATUS=", status);
      last_status = std::move(status);
      if (!message.empty()) sd_notify(0, message.c_str());
    }
  }

  muster::rendezvous::RendezvousServer* const server_;
  const std::string address_;
  // Without a watchdog, STATUS= is refreshed this often.
  absl::Duration period_ = absl::Seconds(5);
  bool watchdog_ = false;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  muster::SetLogTag("musterd");

  CLI::App app{
      "musterd: the muster rendezvous server. Agents (`muster "
      "--rdzv-endpoint=HOST:PORT`) hold a "
      "session with it; workers bootstrap through its key-value store.",
      "musterd"};
  std::string listen = "0.0.0.0:29400";
  std::string port_file;
  std::string http_listen;
  std::string heartbeat_timeout;
  std::string log_level;
  app.set_config("--config", "",
                 "read settings from FILE: `key = value` lines, keys are the "
                 "long flag names (listen, http-listen, heartbeat-timeout, "
                 "log-level, port-file); the command line wins")
      ->type_name("FILE");
  // A misspelt key is an error, not a silently ignored setting.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--listen", listen,
                 "HOST:PORT to listen on; port 0 picks a free port")
      ->capture_default_str();
  app.add_option("--http-listen", http_listen,
                 "HOST:PORT for /healthz, /readyz and /metrics (Prometheus); "
                 "off unless given");
  app.add_option(
      "--port-file", port_file,
      "write the bound port to this file once serving (useful with port 0)");
  app.add_option("--heartbeat-timeout", heartbeat_timeout,
                 "declare an agent lost after this long without a heartbeat, "
                 "for agents that do "
                 "not set their own (e.g. 2s, 500ms; default 2s)");
  app.add_option("--log-level", log_level,
                 "debug, info, warning or error (default: $MUSTER_LOG_LEVEL, "
                 "else info)")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"},
                            CLI::ignore_case));
  app.set_version_flag("--version", absl::StrCat("musterd ", kVersion,
                                                 " (protocol muster.v1, gRPC ",
                                                 grpc::Version(), ")"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, the version, or the error
    return code == 0 ? 0 : kExitUsage;
  }

  if (!log_level.empty()) {
    std::string level = absl::AsciiStrToLower(log_level);
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

  muster::rendezvous::ServerOptions options;
  options.listen = listen;
  options.http_listen = http_listen;
  if (!heartbeat_timeout.empty()) {
    absl::Duration d;
    if (!ParseDurationFlag(heartbeat_timeout, &d) ||
        d <= absl::ZeroDuration()) {
      std::cerr << "musterd: --heartbeat-timeout: '" << heartbeat_timeout
                << "' is not a positive duration (examples: 2s, 500ms, 1.5)\n";
      return kExitUsage;
    }
    options.coordinator.default_heartbeat_timeout = d;
  }

  // SIGINT/SIGTERM are taken by sigwait below, never by a handler. Blocked
  // before any thread starts, so every gRPC thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = muster::rendezvous::RendezvousServer::Start(options);
  if (!server.ok()) {
    MUSTER_LOG(ERROR) << server.status().message();
    sd_notifyf(0, "STATUS=cannot serve: %s",
               std::string(server.status().message()).c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument
               ? kExitUsage
               : kExitCannotServe;
  }
  MUSTER_LOG(INFO) << "musterd listening on " << (*server)->address();
  if ((*server)->http_port() != 0) {
    MUSTER_LOG(INFO) << "musterd serving /healthz, /readyz, /metrics on port "
                     << (*server)->http_port();
  }
  if (!port_file.empty()) {
    std::string error;
    if (!WritePortFile(port_file, (*server)->port(), &error)) {
      MUSTER_LOG(ERROR) << "--port-file: " << error;
      (*server)->Shutdown(kShutdownGrace);
      return kExitCannotServe;
    }
  }
  SystemdNotifier notifier(server->get(), (*server)->address());

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  const char* signal_name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
  MUSTER_LOG(INFO) << "musterd: " << signal_name << ", shutting down";
  notifier.Stop();
  sd_notifyf(0, "STOPPING=1\nSTATUS=shutting down (%s)", signal_name);
  (*server)->Shutdown(kShutdownGrace);
  MUSTER_LOG(INFO) << "musterd stopped";
  return 0;
}
