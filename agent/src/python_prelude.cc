#include "agent/src/python_prelude.h"

#include "absl/strings/str_cat.h"
#include "muster/platform/stack_reader.h"

namespace muster::agent {
namespace {

// `muster stacks` and the hang report for Python workers: every
// program the launcher runs through Python (a .py script, -m, --run-path)
// starts with this prelude. When the agent set MUSTER_STACKS_FILE and
// MUSTER_STACKS_SIGNAL or MUSTER_STACKS_EVENT (agent/src/stack_capture.h),
// it arranges for every thread's Python stack to be written to the file on
// request, and says so in the file with the main thread's ident (and the
// dumping thread's, see below); the agent asks only after that line is
// there. The variables are removed, so that the worker's own children
// (DataLoader workers) do not write to the same file.
//
// Linux (MUSTER_STACKS_SIGNAL): faulthandler.register for that signal.
// chain=False: the signal is a real-time one nobody else uses, whose default
// action would end the process. A thread stuck in C code holding the GIL
// still dumps (faulthandler writes from the signal handler, without the
// GIL), but only its Python frames; the C frames are not shown.
//
// Windows (MUSTER_STACKS_EVENT; no faulthandler.register, no such signal):
// the auto-reset event MUSTER_STACKS_EVENT + pid, created here through
// ctypes, and a thread (_thread: no threading.Thread, whose frames would
// show) that waits on it without the GIL and calls
// faulthandler.dump_traceback. That thread needs the GIL to dump: when a
// thread holds it in C code, no dump comes and the agent reads the native
// stacks instead. The agent leaves the dumping thread out of the answer.
//
// The user's script is unchanged: the runner that follows runs it as
// `python SCRIPT` or `python -m MODULE` would (runpy, __main__, sys.argv,
// sys.path[0]). The code has no double quote: Windows' command-line quoting
// stays simple.
constexpr char kStacksPrelude[] =
    "import os as _mo, sys as _ms\n"
    "def _muster_stacks():\n"
    "    p = _mo.environ.pop('MUSTER_STACKS_FILE', '')\n"
    "    s = _mo.environ.pop('MUSTER_STACKS_SIGNAL', '')\n"
    "    e = _mo.environ.pop('MUSTER_STACKS_EVENT', '')\n"
    "    try:\n"
    "        import faulthandler, threading\n"
    "        if not p:\n"
    "            return\n"
    "        w = 0\n"
    "        if s and hasattr(faulthandler, 'register'):\n"
    "            f = open(p, 'a', buffering=1)\n"
    "            faulthandler.register(int(s), file=f, all_threads=True,\n"
    "                                  chain=False)\n"
    "        elif e and _ms.platform == 'win32':\n"
    "            import ctypes, _thread\n"
    "            k = ctypes.WinDLL('kernel32', use_last_error=True)\n"
    "            k.CreateEventW.restype = ctypes.c_void_p\n"
    "            k.CreateEventW.argtypes = (ctypes.c_void_p, ctypes.c_int,\n"
    "                                       ctypes.c_int, ctypes.c_wchar_p)\n"
    "            k.WaitForSingleObject.restype = ctypes.c_uint32\n"
    "            k.WaitForSingleObject.argtypes = (ctypes.c_void_p,\n"
    "                                              ctypes.c_uint32)\n"
    "            h = k.CreateEventW(None, 0, 0, e + str(_mo.getpid()))\n"
    "            if not h:\n"
    "                return\n"
    "            f = open(p, 'a', buffering=1)\n"
    "            def _muster_watch():\n"
    "                while k.WaitForSingleObject(h, 0xFFFFFFFF) == 0:\n"
    "                    faulthandler.dump_traceback(file=f, "
    "all_threads=True)\n"
    "            w = _thread.start_new_thread(_muster_watch, ())\n"
    "        else:\n"
    "            return\n"
    "        _ms._muster_stacks_file = f\n"
    "        f.write('muster-stacks-ready main=%x watcher=%x\\n' %\n"
    "                (threading.main_thread().ident, w))\n"
    "    except Exception:\n"
    "        pass\n"
    "_muster_stacks()\n"
    "del _muster_stacks, _mo, _ms\n";

// `python SCRIPT ARGS` after the prelude: sys.argv, sys.path[0] and __main__
// as Python sets them for a script.
constexpr char kScriptRunner[] =
    "import os, runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "del os\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n";

// `python -m MODULE ARGS` after the prelude (sys.path[0] stays the current
// directory, as under -m).
constexpr char kModuleRunner[] =
    "import runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n";

}  // namespace

std::vector<std::string> WithStacksPrelude(
    const std::vector<std::string>& program,
    const std::string& python_interpreter,
    const std::map<std::string, std::string>& env, bool* applied) {
  *applied = false;
  const bool trigger =
      platform::StacksSignal() != 0 || !platform::StacksEventPrefix().empty();
  if (python_interpreter.empty() || !trigger || program.size() < 3 ||
      program[0] != python_interpreter || program[1] != "-u")
    return program;
  if (auto it = env.find("MUSTER_PYTHON_STACKS");
      it != env.end() && it->second == "0")
    return program;
  std::vector<std::string> out = {program[0], "-u", "-c"};
  size_t rest = 2;
  if (program[2] == "-m" && program.size() >= 4) {
    out.push_back(absl::StrCat(kStacksPrelude, kModuleRunner));
    rest = 3;
  } else if (program[2] == "-c" && program.size() >= 4) {
    out.push_back(absl::StrCat(kStacksPrelude, program[3]));
    rest = 4;
  } else if (program[2].empty() || program[2][0] == '-') {
    return program;  // an interpreter option muster did not put there
  } else {
    out.push_back(absl::StrCat(kStacksPrelude, kScriptRunner));
  }
  out.insert(out.end(), program.begin() + static_cast<long>(rest),
             program.end());
  *applied = true;
  return out;
}

}  // namespace muster::agent
