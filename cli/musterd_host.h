// musterd and what hosts it: the service manager it reports to
// (ServiceNotifier) and the stop requests it serves until (WaitForStop). On
// platform interfaces, so that tests drive both with fakes (platform/fake/).
#ifndef MUSTER_CLI_MUSTERD_HOST_H_
#define MUSTER_CLI_MUSTERD_HOST_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "muster/common/logging.h"
#include "muster/platform/event_log.h"
#include "muster/platform/service_host.h"
#include "muster/platform/stop_requests.h"

namespace muster::cli {

// Talks to the service manager while musterd serves: READY=1 with the first
// status line, then STATUS= when the line changes, and WATCHDOG=1 at half of
// the watchdog interval the manager asked for. Each ping first asks
// `status_line` (which takes the Coordinator's lock for its counters): a
// musterd whose rendezvous state is stuck stops pinging and systemd restarts
// it. Does nothing when no service manager listens. Stop() before what
// status_line reads goes away.
class ServiceNotifier {
 public:
  // `host` (not owned) outlives this object.
  ServiceNotifier(platform::ServiceHost* host,
                  std::function<std::string()> status_line);
  ~ServiceNotifier() { Stop(); }
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  // Ends the pings. Idempotent.
  void Stop();

  // Without a watchdog, STATUS= is refreshed this often.
  static constexpr absl::Duration kStatusPeriod = absl::Seconds(5);

 private:
  void Run();

  platform::ServiceHost* const host_;
  const std::function<std::string()> status_line_;
  absl::Duration period_ = kStatusPeriod;
  bool watchdog_ = false;
  absl::Notification stop_;
  std::thread thread_;
};

// Blocks until a stop request other than SIGHUP arrives and returns its
// signal; each SIGHUP meanwhile runs `on_hangup` (musterd reloads its TLS
// files) and the wait goes on.
int WaitForStop(platform::StopRequestSource& stops,
                const std::function<void()>& on_hangup);

// The arguments a Windows service runs musterd with, from the command line
// that installs it (`args`: musterd's arguments, without the program name):
// --install-service and --uninstall-service dropped, --service-name given as
// `--service-name=NAME` (the service reports under its own name), every other
// argument as it was, in order. Pure.
std::vector<std::string> ServiceArguments(const std::vector<std::string>& args,
                                          const std::string& service_name);

// The value of the last --service-name among `args` ("--service-name=NAME"
// or "--service-name NAME"); "musterd" when none. Pure.
std::string ServiceNameFromArgs(const std::vector<std::string>& args);

// The path flags among `args` (--config, --port-file, --state-dir,
// --log-file, --tls-*, --admin-token-file) whose value is a relative path,
// as "--flag=value": a service starts in %SystemRoot%\system32, where they
// would point elsewhere. `is_absolute` decides for this OS. Pure.
std::vector<std::string> RelativePathFlags(
    const std::vector<std::string>& args,
    const std::function<bool(const std::string&)>& is_absolute);

// Sends every log line to the end of `path` as well as stderr (a service has
// no console): opened now, appended line by line, flushed after each line.
// Errors: INVALID_ARGUMENT naming the path when it cannot be opened.
absl::Status LogToFile(const std::string& path);

// LogToFile, with the file optional (empty `path`: stderr only), and the
// lines EventKindOf picks also reported to `events` when it is not null (a
// Windows service's Application log).
absl::Status LogTo(const std::string& path,
                   std::shared_ptr<platform::EventLog> events);

// Which of musterd's log lines are events for the system's event log, and
// of which kind: every ERROR line an error, every WARNING line a warning;
// among the INFO lines the server's start ("musterd listening on ..."), its
// stop ("musterd stopped") as information, and a job's failure ("job J:
// FAILED in round R: ...", rendezvous/src/core/coordinator_failure.cc) as an
// error. nullopt: the line is only logged. Pure.
std::optional<platform::EventKind> EventKindOf(LogLevel level,
                                               absl::string_view body);

}  // namespace muster::cli

#endif  // MUSTER_CLI_MUSTERD_HOST_H_
