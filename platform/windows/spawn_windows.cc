#include "platform/windows/spawn_windows.h"

#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/platform/env.h"

namespace muster::platform::windows {
namespace {

// The child's ends of its pipes are made inheritable only while this is held
// across CreateProcessW, so that a process started by another thread at the
// same time never inherits them (it would hold our pipes open).
std::mutex& SpawnMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

std::string LowerExtension(const std::string& path) {
  const size_t slash = path.find_last_of("\\/:");
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return "";
  return absl::AsciiStrToLower(path.substr(dot));
}

// The first two bytes of `path` ("" when unreadable).
std::string Magic(const std::string& path) {
  UniqueHandle h(
      CreateFileW(Widen(path).c_str(), GENERIC_READ,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                  nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!h.valid()) return "";
  char buf[2] = {0, 0};
  DWORD n = 0;
  if (!ReadFile(h.get(), buf, 2, &n, nullptr)) return "";
  return std::string(buf, n);
}

absl::StatusOr<UniqueHandle> NullDevice() {
  SECURITY_ATTRIBUTES sa{sizeof(sa), nullptr, FALSE};
  UniqueHandle h(CreateFileW(L"NUL", GENERIC_READ | GENERIC_WRITE,
                             FILE_SHARE_READ | FILE_SHARE_WRITE, &sa,
                             OPEN_EXISTING, 0, nullptr));
  if (!h.valid())
    return absl::InternalError(absl::StrCat("open NUL: ", LastErrorText()));
  return h;
}

absl::Status MakePipe(UniqueHandle* read_end, UniqueHandle* write_end) {
  SECURITY_ATTRIBUTES sa{sizeof(sa), nullptr, FALSE};
  HANDLE r = nullptr;
  HANDLE w = nullptr;
  if (!CreatePipe(&r, &w, &sa, 64 * 1024)) {
    return absl::InternalError(absl::StrCat("CreatePipe: ", LastErrorText()));
  }
  read_end->reset(r);
  write_end->reset(w);
  return absl::OkStatus();
}

absl::StatusOr<UniqueHandle> MakeKillOnCloseJob() {
  UniqueHandle job(CreateJobObjectW(nullptr, nullptr));
  if (!job.valid()) {
    return absl::InternalError(
        absl::StrCat("CreateJobObject: ", LastErrorText()));
  }
  JOBOBJECT_EXTENDED_LIMIT_INFORMATION info{};
  // KILL_ON_JOB_CLOSE: the tree dies when the last handle to the job closes
  // (the launcher ends, however). DIE_ON_UNHANDLED_EXCEPTION: a crash ends the
  // process with its NTSTATUS instead of waiting on an error dialog.
  info.BasicLimitInformation.LimitFlags =
      JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE |
      JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
  if (!SetInformationJobObject(job.get(), JobObjectExtendedLimitInformation,
                               &info, sizeof(info))) {
    return absl::InternalError(
        absl::StrCat("SetInformationJobObject: ", LastErrorText()));
  }
  return job;
}

std::string CreateProcessFailure(const SpawnRequest& r, DWORD error) {
  const std::string& program = r.command.program;
  switch (error) {
    case ERROR_DIRECTORY:
    case ERROR_PATH_NOT_FOUND:
      if (!r.cwd.empty()) {
        return absl::StrCat("cannot start ", r.name, ": working directory '",
                            r.cwd, "': ", ErrorText(error),
                            "; give an existing directory");
      }
      break;
    case ERROR_BAD_EXE_FORMAT:
    case ERROR_EXE_MACHINE_TYPE_MISMATCH:
      return absl::StrCat(
          "cannot start ", r.name, ": '", program,
          "' is not a program for this machine: ", ErrorText(error));
    case ERROR_ACCESS_DENIED:
      return absl::StrCat("cannot start ", r.name, ": '", program,
                          "' may not be run: ", ErrorText(error),
                          "; check its permissions");
    default:
      break;
  }
  return absl::StrCat("cannot start ", r.name, ": CreateProcess '", program,
                      "' failed: ", ErrorText(error));
}

}  // namespace

absl::StatusOr<std::string> CheckRunnable(const std::string& argv0,
                                          const std::string& path) {
  const std::string ext = LowerExtension(path);
  if (ext == ".py") return path;
  if (ext == ".bat" || ext == ".cmd") {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", argv0, "' (", path,
        ") is a batch file; muster does not run batch files directly (cmd.exe "
        "quotes their arguments by other rules): give cmd.exe /d /c and the "
        "file, or the program it runs"));
  }
  const std::string magic = Magic(path);
  if (magic == "MZ") return path;
  if (magic == "#!") {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", argv0, "' (", path,
        ") is a script with a #! line, which Windows ignores; run it through "
        "its interpreter (e.g. python ",
        argv0, ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "'", argv0, "' (", path,
      ") is not a Windows program (no .exe image); give a program, or run the "
      "file through its interpreter"));
}

std::string EnvValue(const std::map<std::string, std::string>& env,
                     const std::string& name) {
  for (const auto& [k, v] : env) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return GetEnv(name).value_or("");
}

absl::StatusOr<Resolved> ResolveCommand(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env) {
  const std::string path = EnvValue(env, "PATH");
  auto program = FindExecutable(argv[0], path);
  if (!program.ok()) return program.status();
  Resolved r;
  if (LowerExtension(*program) != ".py") {
    r.program = *program;
    r.argv = argv;
    return r;
  }
  // Windows runs no script by its "#!" line: a .py runs through python.exe.
  auto python = FindExecutable("python.exe", path);
  if (!python.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", argv[0],
        "' is a Python script, which Windows runs only through python.exe, "
        "and python.exe is not in PATH (",
        path, "); install Python or add its directory to PATH"));
  }
  r.program = *python;
  r.argv = {*python, *program};
  r.argv.insert(r.argv.end(), argv.begin() + 1, argv.end());
  return r;
}

absl::StatusOr<Spawned> SpawnInJob(const SpawnRequest& request) {
  Spawned out;
  UniqueHandle stdout_w;
  UniqueHandle stderr_w;
  if (auto s = MakePipe(&out.stdout_r, &stdout_w); !s.ok()) return s;
  if (request.pipe_stderr) {
    if (auto s = MakePipe(&out.stderr_r, &stderr_w); !s.ok()) return s;
  }
  auto null_dev = NullDevice();
  if (!null_dev.ok()) return null_dev.status();
  auto job = MakeKillOnCloseJob();
  if (!job.ok()) return job.status();
  out.job = *std::move(job);

  std::map<std::string, std::string> env = request.env;
  // Without SystemRoot, Winsock (and so every networked program) fails to
  // start in the child: keep the launcher's when the spec leaves it out.
  if (EnvValue(env, "SystemRoot").empty()) {
    if (auto root = GetEnv("SystemRoot")) env["SystemRoot"] = *root;
  }
  std::wstring env_block = EnvironmentBlock(env);
  std::wstring cmdline = BuildCommandLine(request.command.argv);
  const std::wstring program = Widen(request.command.program);
  const std::wstring cwd = Widen(request.cwd);

  STARTUPINFOW si{};
  si.cb = sizeof(si);
  si.dwFlags = STARTF_USESTDHANDLES;
  si.hStdInput = null_dev->get();
  si.hStdOutput = stdout_w.get();
  si.hStdError = request.pipe_stderr        ? stderr_w.get()
                 : request.stderr_to_stdout ? stdout_w.get()
                                            : null_dev->get();
  PROCESS_INFORMATION pi{};
  DWORD error = 0;
  {
    std::lock_guard<std::mutex> lock(SpawnMutex());
    for (HANDLE h : {si.hStdInput, si.hStdOutput, si.hStdError}) {
      SetHandleInformation(h, HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT);
    }
    // Suspended until it is in its job, so that nothing it starts escapes.
    const BOOL ok = CreateProcessW(
        program.c_str(), cmdline.data(), nullptr, nullptr, TRUE,
        CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP |
            CREATE_UNICODE_ENVIRONMENT,
        env_block.data(), cwd.empty() ? nullptr : cwd.c_str(), &si, &pi);
    if (!ok) error = GetLastError();
    for (HANDLE h : {si.hStdInput, si.hStdOutput, si.hStdError}) {
      SetHandleInformation(h, HANDLE_FLAG_INHERIT, 0);
    }
  }
  if (error != 0) {
    return absl::FailedPreconditionError(CreateProcessFailure(request, error));
  }
  out.process.reset(pi.hProcess);
  UniqueHandle thread(pi.hThread);
  out.pid = static_cast<int>(pi.dwProcessId);
  if (!AssignProcessToJobObject(out.job.get(), out.process.get())) {
    const std::string why = LastErrorText();
    TerminateProcess(out.process.get(), kKilledExitCode);
    WaitForSingleObject(out.process.get(), 5000);
    return absl::InternalError(
        absl::StrCat("cannot put ", request.name, " in a job object: ", why));
  }
  if (!request.cpu_affinity.empty()) {
    DWORD_PTR mask = 0;
    for (int cpu : request.cpu_affinity) {
      if (cpu >= 0 && cpu < static_cast<int>(8 * sizeof(DWORD_PTR)))
        mask |= static_cast<DWORD_PTR>(1) << cpu;
    }
    if (mask == 0 || !SetProcessAffinityMask(out.process.get(), mask)) {
      TerminateJobObject(out.job.get(), kKilledExitCode);
      return absl::FailedPreconditionError(
          absl::StrCat("cannot bind ", request.name, " to CPUs ",
                       absl::StrJoin(request.cpu_affinity, ","), ": ",
                       mask == 0 ? "no CPU below 64" : LastErrorText()));
    }
  }
  if (ResumeThread(thread.get()) == static_cast<DWORD>(-1)) {
    const std::string why = LastErrorText();
    TerminateJobObject(out.job.get(), kKilledExitCode);
    return absl::InternalError(
        absl::StrCat("cannot resume ", request.name, ": ", why));
  }
  return out;
}

}  // namespace muster::platform::windows
