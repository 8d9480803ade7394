#include "cli/musterd_host.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/platform/env.h"
#include "muster/platform/signals.h"

namespace muster::cli {

ServiceNotifier::ServiceNotifier(platform::ServiceHost* host,
                                 std::function<std::string()> status_line)
    : host_(host), status_line_(std::move(status_line)) {
  if (!host_->managed()) return;
  const absl::Duration watchdog = host_->watchdog_interval();
  if (watchdog > absl::ZeroDuration()) {
    period_ = watchdog / 2;
    watchdog_ = true;
    MUSTER_LOG(INFO) << "systemd watchdog: " << watchdog << ", pinging every "
                     << period_;
  }
  host_->Ready(status_line_());
  thread_ = std::thread([this] { Run(); });
}

void ServiceNotifier::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ServiceNotifier::Run() {
  std::string last_status;
  while (!stop_.WaitForNotificationWithTimeout(period_)) {
    std::string status = status_line_();
    const bool changed = status != last_status;
    if (watchdog_) {
      host_->Ping(changed ? status : "");
    } else if (changed) {
      host_->SetStatus(status);
    }
    last_status = std::move(status);
  }
}

int WaitForStop(platform::StopRequestSource& stops,
                const std::function<void()>& on_hangup) {
  while (true) {
    const int sig = stops.Wait();
    if (sig != platform::kSignalHangup) return sig;
    on_hangup();
  }
}

namespace {

// `arg` is `--name` or `--name=...`.
bool IsFlag(const std::string& arg, absl::string_view name) {
  return arg == name || absl::StartsWith(arg, absl::StrCat(name, "="));
}

}  // namespace

std::vector<std::string> ServiceArguments(const std::vector<std::string>& args,
                                          const std::string& service_name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (IsFlag(a, "--install-service") || IsFlag(a, "--uninstall-service")) {
      continue;
    }
    if (a == "--service-name") {
      ++i;  // its value is the next argument
      continue;
    }
    if (IsFlag(a, "--service-name")) continue;
    out.push_back(a);
  }
  out.push_back(absl::StrCat("--service-name=", service_name));
  return out;
}

std::string ServiceNameFromArgs(const std::vector<std::string>& args) {
  std::string name = "musterd";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--service-name" && i + 1 < args.size()) {
      name = args[++i];
    } else if (absl::StartsWith(args[i], "--service-name=")) {
      name = args[i].substr(std::string("--service-name=").size());
    }
  }
  return name;
}

std::vector<std::string> RelativePathFlags(
    const std::vector<std::string>& args,
    const std::function<bool(const std::string&)>& is_absolute) {
  static constexpr absl::string_view kPathFlags[] = {
      "--config",   "--port-file", "--state-dir",     "--log-file",
      "--tls-cert", "--tls-key",   "--tls-client-ca", "--admin-token-file"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    for (absl::string_view flag : kPathFlags) {
      std::string value;
      if (args[i] == flag && i + 1 < args.size()) {
        value = args[i + 1];
      } else if (absl::StartsWith(args[i], absl::StrCat(flag, "="))) {
        value = args[i].substr(flag.size() + 1);
      } else {
        continue;
      }
      if (!value.empty() && !is_absolute(value)) {
        out.push_back(absl::StrCat(flag, "=", value));
      }
    }
  }
  return out;
}

absl::Status LogToFile(const std::string& path) { return LogTo(path, nullptr); }

absl::Status LogTo(const std::string& path,
                   std::shared_ptr<platform::EventLog> events) {
  std::shared_ptr<std::ofstream> file;
  if (!path.empty()) {
    file =
        std::make_shared<std::ofstream>(path, std::ios::app | std::ios::binary);
    if (!*file) {
      return absl::InvalidArgumentError(
          absl::StrCat("--log-file=", path,
                       ": cannot open it for appending: ", std::strerror(errno),
                       "; give a file in a directory musterd may write"));
    }
  }
  // The logger calls the sink under its own lock, one line at a time.
  SetLogSink([file, events](LogLevel level, const std::string& body) {
    static constexpr absl::string_view kLevels[] = {"DEBUG", "INFO", "WARNING",
                                                    "ERROR"};
    const std::string line = absl::StrCat(
        absl::FormatTime("%Y-%m-%dT%H:%M:%E3S%Ez", absl::Now(),
                         absl::LocalTimeZone()),
        " ", kLevels[static_cast<int>(level)], " [musterd] ", body, "\n");
    platform::WriteToStderr(line);
    if (file != nullptr) {
      *file << line;
      file->flush();
    }
    if (events != nullptr) {
      if (std::optional<platform::EventKind> kind = EventKindOf(level, body)) {
        events->Report(*kind, body);
      }
    }
  });
  return absl::OkStatus();
}

std::optional<platform::EventKind> EventKindOf(LogLevel level,
                                               absl::string_view body) {
  switch (level) {
    case LogLevel::kError:
      return platform::EventKind::kError;
    case LogLevel::kWarning:
      return platform::EventKind::kWarning;
    case LogLevel::kInfo:
      if (absl::StartsWith(body, "musterd listening on ") ||
          body == "musterd stopped") {
        return platform::EventKind::kInformation;
      }
      if (absl::StartsWith(body, "job ") &&
          absl::StrContains(body, ": FAILED in round ")) {
        return platform::EventKind::kError;
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace muster::cli
