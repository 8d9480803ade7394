// ReadNativeStacks on Windows, with DbgHelp inside this process.
//
// As on Linux the agent reads its workers' stacks itself, no debugger child:
// OpenProcess (query + read memory) is all it needs, which the workers'
// parent running as the same user always gets. Each thread is suspended
// (SuspendThread) only while its registers are read and its stack is walked
// (StackWalk64, from the modules' x64 unwind tables, .pdata), and resumed at
// once, whatever happens (ThreadSuspension). The names are looked up after
// the thread runs again: the first lookup in a module loads its symbols,
// which can take far longer than the walk.
//
// Names: first a MinGW image's own COFF symbol table (coff_symbols.h: it
// names every function; Windows' DbgHelp reads no DWARF, and wine's, which
// does, then ignores the COFF table, so neither would name a release build's
// functions), else SymFromAddr (PDBs of MSVC-built code, the system DLLs'
// exports). MinGW's names are Itanium-mangled ("_ZN6muster..."): demangled
// as on Linux. Thread names:
// GetThreadDescription (Windows 10 1607+; looked up at run time, since older
// systems lack it). The main thread: the earliest created (GetThreadTimes).
//
// DbgHelp is single-threaded (every function, per its documentation): one
// capture at a time in this process (dbghelp_mu).
#include <windows.h>
// clang-format off: dbghelp.h and tlhelp32.h need windows.h first.
#include <dbghelp.h>
#include <tlhelp32.h>
// clang-format on

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "muster/platform/stack_reader.h"
#include "platform/windows/coff_symbols.h"
#include "platform/windows/win_util.h"

namespace muster::platform {
namespace {

using windows::ErrorText;
using windows::Narrow;
using windows::UniqueHandle;

ABSL_CONST_INIT absl::Mutex dbghelp_mu(absl::kConstInit);

std::string Demangle(const char* name) {
  if (name == nullptr || *name == '\0') return "??";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  if (status == 0 && out != nullptr) return out.get();
  return name;
}

// Resumes the thread when it goes out of scope: a worker thread must never
// stay suspended, whichever way the walk ends.
class ThreadSuspension {
 public:
  explicit ThreadSuspension(HANDLE thread) : thread_(thread) {
    suspended_ = SuspendThread(thread_) != static_cast<DWORD>(-1);
  }
  ~ThreadSuspension() {
    if (suspended_) ResumeThread(thread_);
  }
  ThreadSuspension(const ThreadSuspension&) = delete;
  ThreadSuspension& operator=(const ThreadSuspension&) = delete;
  bool ok() const { return suspended_; }

 private:
  HANDLE thread_;
  bool suspended_ = false;
};

// SymInitialize's session for one process, cleaned up when done.
class SymbolSession {
 public:
  explicit SymbolSession(HANDLE process) : process_(process) {
    SymSetOptions(SYMOPT_UNDNAME | SYMOPT_DEFERRED_LOADS |
                  SYMOPT_FAIL_CRITICAL_ERRORS | SYMOPT_NO_PROMPTS |
                  SYMOPT_LOAD_LINES);
    // TRUE: load the process's modules now (their list, not their symbols:
    // SYMOPT_DEFERRED_LOADS).
    ok_ = SymInitialize(process_, nullptr, TRUE) != FALSE;
    if (!ok_) error_ = GetLastError();
  }
  ~SymbolSession() {
    if (ok_) SymCleanup(process_);
  }
  SymbolSession(const SymbolSession&) = delete;
  SymbolSession& operator=(const SymbolSession&) = delete;
  bool ok() const { return ok_; }
  DWORD error() const { return error_; }

 private:
  HANDLE process_;
  bool ok_ = false;
  DWORD error_ = 0;
};

using GetThreadDescriptionFn = HRESULT(WINAPI*)(HANDLE, PWSTR*);

GetThreadDescriptionFn GetThreadDescriptionFunction() {
  static const GetThreadDescriptionFn fn = [] {
    HMODULE kernel32 = GetModuleHandleW(L"kernel32.dll");
    FARPROC p = kernel32 == nullptr
                    ? nullptr
                    : GetProcAddress(kernel32, "GetThreadDescription");
    return reinterpret_cast<GetThreadDescriptionFn>(reinterpret_cast<void*>(p));
  }();
  return fn;
}

std::string ThreadName(HANDLE thread) {
  GetThreadDescriptionFn fn = GetThreadDescriptionFunction();
  if (fn == nullptr) return "";
  PWSTR text = nullptr;
  if (FAILED(fn(thread, &text)) || text == nullptr) return "";
  std::string name = Narrow(text);
  LocalFree(text);
  return name;
}

// The return addresses of one thread, innermost first; the thread is
// suspended only here.
std::vector<DWORD64> WalkThread(HANDLE process, HANDLE thread, int max_frames) {
  std::vector<DWORD64> pcs;
  ThreadSuspension suspension(thread);
  if (!suspension.ok()) return pcs;
  // StackWalk64 writes the unwound registers back into the context, which
  // the x64 CONTEXT's movaps-based users want 16-byte aligned.
  alignas(16) CONTEXT context;
  std::memset(&context, 0, sizeof(context));
  context.ContextFlags = CONTEXT_FULL;
  if (!GetThreadContext(thread, &context)) return pcs;
  STACKFRAME64 frame;
  std::memset(&frame, 0, sizeof(frame));
  frame.AddrPC.Offset = context.Rip;
  frame.AddrPC.Mode = AddrModeFlat;
  frame.AddrFrame.Offset = context.Rbp;
  frame.AddrFrame.Mode = AddrModeFlat;
  frame.AddrStack.Offset = context.Rsp;
  frame.AddrStack.Mode = AddrModeFlat;
  DWORD64 last_sp = 0;
  while (static_cast<int>(pcs.size()) < max_frames &&
         StackWalk64(IMAGE_FILE_MACHINE_AMD64, process, thread, &frame,
                     &context, nullptr, SymFunctionTableAccess64,
                     SymGetModuleBase64, nullptr)) {
    if (frame.AddrPC.Offset == 0) break;
    // A frame that does not move the stack would repeat for ever.
    if (!pcs.empty() && pcs.back() == frame.AddrPC.Offset &&
        frame.AddrStack.Offset == last_sp)
      break;
    pcs.push_back(frame.AddrPC.Offset);
    last_sp = frame.AddrStack.Offset;
  }
  return pcs;
}

// The COFF function table of an image file, read once per version of the
// file (its size and time of last write); null when it cannot be read.
// Under dbghelp_mu.
std::shared_ptr<const windows::CoffFunctions> CoffTable(
    const std::wstring& path) {
  struct Cached {
    ULONGLONG size = 0;
    ULONGLONG written = 0;
    std::shared_ptr<const windows::CoffFunctions> table;
  };
  static auto* cache = new std::map<std::wstring, Cached>();
  WIN32_FILE_ATTRIBUTE_DATA a;
  if (!GetFileAttributesExW(path.c_str(), GetFileExInfoStandard, &a))
    return nullptr;
  const ULONGLONG size =
      (static_cast<ULONGLONG>(a.nFileSizeHigh) << 32) | a.nFileSizeLow;
  const ULONGLONG written =
      (static_cast<ULONGLONG>(a.ftLastWriteTime.dwHighDateTime) << 32) |
      a.ftLastWriteTime.dwLowDateTime;
  if (auto it = cache->find(path); it != cache->end() &&
                                   it->second.size == size &&
                                   it->second.written == written)
    return it->second.table;
  std::ifstream in(std::filesystem::path(path), std::ios::binary);
  if (!in) return nullptr;
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  auto table = std::make_shared<const windows::CoffFunctions>(
      windows::CoffFunctions::Parse(bytes));
  // A long-lived agent sees few distinct programs; a bound all the same.
  if (cache->size() >= 64) cache->clear();
  (*cache)[path] = {size, written, table};
  return table;
}

// The name from the image's COFF symbol table (MinGW), or empty.
std::string CoffName(HANDLE process, DWORD64 address) {
  const DWORD64 base = SymGetModuleBase64(process, address);
  if (base == 0 || address - base > 0xffffffffu) return "";
  IMAGEHLP_MODULEW64 module;
  std::memset(&module, 0, sizeof(module));
  module.SizeOfStruct = sizeof(module);
  if (!SymGetModuleInfoW64(process, base, &module)) return "";
  std::wstring path = module.LoadedImageName[0] != L'\0'
                          ? module.LoadedImageName
                          : module.ImageName;
  if (path.empty()) return "";
  std::shared_ptr<const windows::CoffFunctions> table = CoffTable(path);
  if (table == nullptr) return "";
  return table->NameAt(static_cast<uint32_t>(address - base));
}

std::string FunctionName(HANDLE process, DWORD64 pc, bool innermost) {
  // A return address points after the call: look up the call itself.
  const DWORD64 lookup = innermost ? pc : pc - 1;
  // MinGW's images: the COFF table names every function (DbgHelp may
  // know only the runtime's few that have DWARF, or nothing).
  if (std::string coff = CoffName(process, lookup); !coff.empty())
    return Demangle(coff.c_str());
  alignas(SYMBOL_INFO) char buffer[sizeof(SYMBOL_INFO) + MAX_SYM_NAME];
  std::memset(buffer, 0, sizeof(buffer));
  auto* symbol = reinterpret_cast<SYMBOL_INFO*>(buffer);
  symbol->SizeOfStruct = sizeof(SYMBOL_INFO);
  symbol->MaxNameLen = MAX_SYM_NAME;
  DWORD64 displacement = 0;
  if (!SymFromAddr(process, lookup, &displacement, symbol)) return "??";
  return Demangle(symbol->Name);
}

struct ThreadEntry {
  DWORD tid = 0;
  ULONGLONG created = 0;  // FILETIME ticks; 0 when unknown
};

}  // namespace

absl::StatusOr<std::vector<NativeThreadStack>> ReadNativeStacks(
    int pid, int max_frames) {
  if (max_frames <= 0) max_frames = 64;
  UniqueHandle process(OpenProcess(PROCESS_QUERY_INFORMATION | PROCESS_VM_READ,
                                   FALSE, static_cast<DWORD>(pid)));
  if (!process.valid()) {
    const DWORD error = GetLastError();
    // OpenProcess says ERROR_INVALID_PARAMETER for a pid no process has.
    if (error == ERROR_INVALID_PARAMETER)
      return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
    if (error == ERROR_ACCESS_DENIED) {
      return absl::PermissionDeniedError(absl::StrCat(
          "not allowed to read process ", pid, " (", ErrorText(error),
          "): the agent must run as the worker's user (or be an "
          "administrator); a protected process cannot be read"));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot open process ", pid, ": ", ErrorText(error)));
  }
  DWORD exit_code = 0;
  if (GetExitCodeProcess(process.get(), &exit_code) &&
      exit_code != STILL_ACTIVE)
    return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));

  UniqueHandle snapshot(CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0));
  if (!snapshot.valid()) {
    return absl::UnavailableError(
        absl::StrCat("cannot list the threads of process ", pid, ": ",
                     windows::LastErrorText()));
  }
  std::vector<ThreadEntry> entries;
  THREADENTRY32 te;
  te.dwSize = sizeof(te);
  for (BOOL more = Thread32First(snapshot.get(), &te); more;
       more = Thread32Next(snapshot.get(), &te)) {
    if (te.th32OwnerProcessID == static_cast<DWORD>(pid))
      entries.push_back({te.th32ThreadID, 0});
    te.dwSize = sizeof(te);
  }
  if (entries.empty())
    return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));

  absl::MutexLock lock(&dbghelp_mu);
  SymbolSession symbols(process.get());
  if (!symbols.ok()) {
    return absl::UnavailableError(
        absl::StrCat("DbgHelp cannot read process ", pid,
                     " (SymInitialize: ", ErrorText(symbols.error()), ")"));
  }
  struct Walked {
    NativeThreadStack stack;
    ULONGLONG created = 0;
    std::vector<DWORD64> pcs;
  };
  std::vector<Walked> walked;
  for (const ThreadEntry& e : entries) {
    UniqueHandle thread(OpenThread(
        THREAD_SUSPEND_RESUME | THREAD_GET_CONTEXT | THREAD_QUERY_INFORMATION,
        FALSE, e.tid));
    if (!thread.valid()) continue;  // ended since the snapshot
    Walked w;
    w.stack.tid = e.tid;
    w.stack.name = ThreadName(thread.get());
    FILETIME created, exited, kernel, user;
    if (GetThreadTimes(thread.get(), &created, &exited, &kernel, &user)) {
      w.created = (static_cast<ULONGLONG>(created.dwHighDateTime) << 32) |
                  created.dwLowDateTime;
    }
    w.pcs = WalkThread(process.get(), thread.get(), max_frames);
    walked.push_back(std::move(w));
  }
  if (walked.empty())
    return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
  // The main thread: the earliest created; the first listed when the times
  // are unknown or equal (the snapshot lists a process's threads in order
  // of creation).
  size_t main = 0;
  for (size_t i = 1; i < walked.size(); ++i) {
    if (walked[i].created != 0 &&
        (walked[main].created == 0 || walked[i].created < walked[main].created))
      main = i;
  }
  walked[main].stack.main = true;
  std::vector<NativeThreadStack> threads;
  for (Walked& w : walked) {
    for (size_t i = 0; i < w.pcs.size(); ++i)
      w.stack.frames.push_back(FunctionName(process.get(), w.pcs[i], i == 0));
    threads.push_back(std::move(w.stack));
  }
  // Main thread first.
  std::stable_partition(threads.begin(), threads.end(),
                        [](const NativeThreadStack& t) { return t.main; });
  return threads;
}

int StacksSignal() { return 0; }

// "Local\": the session's namespace, where a worker of this agent's session
// may create it without SeCreateGlobalPrivilege.
std::string StacksEventPrefix() { return "Local\\muster-stacks-"; }

absl::Status SignalForStacks(int pid) {
  const std::wstring name =
      windows::Widen(absl::StrCat(StacksEventPrefix(), pid));
  UniqueHandle event(OpenEventW(EVENT_MODIFY_STATE, FALSE, name.c_str()));
  if (!event.valid()) {
    return absl::UnavailableError(
        absl::StrCat("process ", pid, " has no stacks event ",
                     windows::Narrow(name), ": ", windows::LastErrorText()));
  }
  if (!SetEvent(event.get())) {
    return absl::UnavailableError(
        absl::StrCat("cannot set the stacks event of process ", pid, ": ",
                     windows::LastErrorText()));
  }
  return absl::OkStatus();
}

}  // namespace muster::platform
