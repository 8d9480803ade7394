// The service host on Windows: the service control manager (SCM).
//
// clang-format off
//   RunService(name, body)
//     StartServiceCtrlDispatcherW ── fails (1063): a console → body() here
//       └─ ServiceMain (SCM's thread) ─ RegisterServiceCtrlHandlerExW
//            START_PENDING → body() ─ Ready() → RUNNING (after it listens)
//            STOP / SHUTDOWN / PRESHUTDOWN → STOP_PENDING + SIGTERM request
//            body returns → STOPPED (its exit code)
// clang-format on
#include <windows.h>
// (after windows.h)
#include <tlhelp32.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "muster/platform/logging.h"
#include "muster/platform/service_host.h"
#include "muster/platform/signals.h"
#include "platform/windows/stop_post.h"
#include "platform/windows/win_util.h"

namespace muster::platform {
namespace {

using windows::ErrorText;
using windows::Widen;

// The state of the one service this process runs.
struct Service {
  absl::Mutex mu;
  std::wstring name;
  const std::function<int()>* body = nullptr;
  int exit_code = 0;
  SERVICE_STATUS_HANDLE handle ABSL_GUARDED_BY(mu) = nullptr;
  SERVICE_STATUS status ABSL_GUARDED_BY(mu){};
};

Service& TheService() {
  static Service* s = new Service();
  return *s;
}

// Reports `state` to the SCM (no-op when not a service).
void Report(DWORD state, int exit_code = 0) {
  Service& s = TheService();
  absl::MutexLock lock(&s.mu);
  if (s.handle == nullptr) return;
  SERVICE_STATUS& st = s.status;
  st.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
  st.dwCurrentState = state;
  st.dwControlsAccepted =
      (state == SERVICE_START_PENDING || state == SERVICE_STOPPED)
          ? 0
          : SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_SHUTDOWN |
                SERVICE_ACCEPT_PRESHUTDOWN;
  st.dwWin32ExitCode = exit_code == 0 ? NO_ERROR : ERROR_SERVICE_SPECIFIC_ERROR;
  st.dwServiceSpecificExitCode = static_cast<DWORD>(exit_code);
  const bool pending =
      state == SERVICE_START_PENDING || state == SERVICE_STOP_PENDING;
  st.dwCheckPoint = pending ? st.dwCheckPoint + 1 : 0;
  st.dwWaitHint = pending ? 30000 : 0;
  SetServiceStatus(s.handle, &st);
}

DWORD WINAPI ControlHandler(DWORD control, DWORD, void*, void*) {
  switch (control) {
    case SERVICE_CONTROL_STOP:
    case SERVICE_CONTROL_SHUTDOWN:
    case SERVICE_CONTROL_PRESHUTDOWN:
      // The same drain as SIGTERM on Linux.
      Report(SERVICE_STOP_PENDING);
      windows::PostStopRequest(kSignalTerminate, /*always=*/true);
      return NO_ERROR;
    case SERVICE_CONTROL_INTERROGATE:
      return NO_ERROR;
    default:
      return ERROR_CALL_NOT_IMPLEMENTED;
  }
}

void WINAPI ServiceMain(DWORD, LPWSTR*) {
  Service& s = TheService();
  SERVICE_STATUS_HANDLE h =
      RegisterServiceCtrlHandlerExW(s.name.c_str(), ControlHandler, nullptr);
  if (h == nullptr) return;
  {
    absl::MutexLock lock(&s.mu);
    s.handle = h;
  }
  Report(SERVICE_START_PENDING);
  s.exit_code = (*s.body)();
  Report(SERVICE_STOPPED, s.exit_code);
}

class ScmHost : public ServiceHost {
 public:
  bool managed() const override {
    Service& s = TheService();
    absl::MutexLock lock(&s.mu);
    return s.handle != nullptr;
  }
  absl::Duration watchdog_interval() const override {
    return absl::ZeroDuration();
  }
  void Ready(absl::string_view status) override {
    Report(SERVICE_RUNNING);
    if (managed()) MUSTER_LOG(INFO) << "service running: " << status;
  }
  // The SCM keeps no status line; the log has it.
  void SetStatus(absl::string_view) override {}
  void Ping(absl::string_view) override {}
  void Stopping(absl::string_view status) override {
    Report(SERVICE_STOP_PENDING);
    if (managed()) MUSTER_LOG(INFO) << "service stopping: " << status;
  }
};

// SC_HANDLE with CloseServiceHandle.
struct ScHandle {
  explicit ScHandle(SC_HANDLE h) : h(h) {}
  ~ScHandle() {
    if (h != nullptr) CloseServiceHandle(h);
  }
  ScHandle(const ScHandle&) = delete;
  ScHandle& operator=(const ScHandle&) = delete;
  SC_HANDLE h;
};

absl::Status ScmError(const std::string& what, const std::string& name,
                      DWORD error) {
  const std::string msg = absl::StrCat("cannot ", what, " the service '", name,
                                       "': ", ErrorText(error));
  switch (error) {
    case ERROR_ACCESS_DENIED:
      return absl::PermissionDeniedError(absl::StrCat(
          msg, "; run it from an elevated (Administrator) prompt"));
    case ERROR_SERVICE_EXISTS:
    case ERROR_DUPLICATE_SERVICE_NAME:
      return absl::AlreadyExistsError(absl::StrCat(
          msg, "; uninstall it first (--uninstall-service --service-name=",
          name, ") or pick another --service-name"));
    case ERROR_SERVICE_DOES_NOT_EXIST:
      return absl::NotFoundError(
          absl::StrCat(msg, "; 'sc query type= service' lists the services"));
    case ERROR_INVALID_NAME:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

std::string ThisExecutable() {
  std::wstring buf(32768, L'\0');
  const DWORD n =
      GetModuleFileNameW(nullptr, buf.data(), static_cast<DWORD>(buf.size()));
  buf.resize(n);
  return windows::Narrow(buf);
}

// The executable name of this process's parent ("services.exe" for a
// service); empty when Windows cannot tell.
std::string ParentExecutable() {
  windows::UniqueHandle snap(CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0));
  if (!snap.valid()) return "";
  const DWORD self = GetCurrentProcessId();
  DWORD parent = 0;
  PROCESSENTRY32W e{};
  e.dwSize = sizeof(e);
  for (BOOL ok = Process32FirstW(snap.get(), &e); ok;
       ok = Process32NextW(snap.get(), &e)) {
    if (e.th32ProcessID == self) parent = e.th32ParentProcessID;
  }
  if (parent == 0) return "";
  e.dwSize = sizeof(e);
  for (BOOL ok = Process32FirstW(snap.get(), &e); ok;
       ok = Process32NextW(snap.get(), &e)) {
    if (e.th32ProcessID == parent) return windows::Narrow(e.szExeFile);
  }
  return "";
}

}  // namespace

ServiceHost* ServiceHost::Default() {
  static ServiceHost* host = new ScmHost();
  return host;
}

int RunService(const std::string& name, const std::function<int()>& body) {
  // Only a process the service control manager (services.exe) started asks
  // it for its service: wine's StartServiceCtrlDispatcherW does not always
  // fail (1063) in a console process as Windows' does, and would then report
  // a console musterd as a service.
  if (!absl::EqualsIgnoreCase(ParentExecutable(), "services.exe")) {
    return body();
  }
  Service& s = TheService();
  s.name = Widen(name);
  s.body = &body;
  SERVICE_TABLE_ENTRYW table[] = {{s.name.data(), ServiceMain},
                                  {nullptr, nullptr}};
  if (StartServiceCtrlDispatcherW(table)) return s.exit_code;
  const DWORD error = GetLastError();
  if (error != ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) {
    MUSTER_LOG(WARNING) << "cannot connect to the service control manager ("
                        << ErrorText(error) << "); running in the console";
  }
  return body();
}

absl::Status InstallService(const ServiceInstall& spec) {
  if (spec.name.empty()) {
    return absl::InvalidArgumentError(
        "the service name is empty; give --service-name=NAME");
  }
  ScHandle scm(OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CREATE_SERVICE));
  if (scm.h == nullptr) return ScmError("install", spec.name, GetLastError());
  std::vector<std::string> argv = {spec.program.empty() ? ThisExecutable()
                                                        : spec.program};
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  const std::wstring command = windows::BuildCommandLine(argv);
  const std::wstring name = Widen(spec.name);
  const std::wstring display =
      Widen(spec.display_name.empty() ? spec.name : spec.display_name);
  ScHandle svc(CreateServiceW(
      scm.h, name.c_str(), display.c_str(), SERVICE_ALL_ACCESS,
      SERVICE_WIN32_OWN_PROCESS,
      spec.auto_start ? SERVICE_AUTO_START : SERVICE_DEMAND_START,
      SERVICE_ERROR_NORMAL, command.c_str(), nullptr, nullptr, nullptr, nullptr,
      nullptr));
  if (svc.h == nullptr) return ScmError("install", spec.name, GetLastError());
  if (!spec.description.empty()) {
    std::wstring text = Widen(spec.description);
    SERVICE_DESCRIPTIONW d{text.data()};
    ChangeServiceConfig2W(svc.h, SERVICE_CONFIG_DESCRIPTION, &d);
  }
  return absl::OkStatus();
}

absl::Status UninstallService(const std::string& name) {
  ScHandle scm(OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CONNECT));
  if (scm.h == nullptr) return ScmError("uninstall", name, GetLastError());
  ScHandle svc(OpenServiceW(scm.h, Widen(name).c_str(),
                            DELETE | SERVICE_STOP | SERVICE_QUERY_STATUS));
  if (svc.h == nullptr) return ScmError("uninstall", name, GetLastError());
  SERVICE_STATUS st{};
  if (QueryServiceStatus(svc.h, &st) && st.dwCurrentState != SERVICE_STOPPED) {
    ControlService(svc.h, SERVICE_CONTROL_STOP, &st);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (QueryServiceStatus(svc.h, &st) &&
           st.dwCurrentState != SERVICE_STOPPED && absl::Now() < deadline) {
      Sleep(100);
    }
    if (st.dwCurrentState != SERVICE_STOPPED) {
      MUSTER_LOG(WARNING) << "the service '" << name
                          << "' did not stop within 30 s; deleting it anyway "
                             "(it goes when it stops)";
    }
  }
  if (!DeleteService(svc.h)) return ScmError("uninstall", name, GetLastError());
  return absl::OkStatus();
}

}  // namespace muster::platform
