#include "agent/src/python_prelude.h"

#include "absl/strings/str_cat.h"
#include "muster/platform/stack_reader.h"

namespace muster::agent {
namespace {

// `muster stacks` and the hang report for Python workers: every
// program the launcher runs through Python (a .py script, -m, --run-path)
// starts with this prelude. When the
// agent set MUSTER_STACKS_FILE and MUSTER_STACKS_SIGNAL
// (agent/src/stack_capture.h), it registers faulthandler for that signal,
// writing every thread's Python stack to the file, and says so in the file
// with the main thread's ident; the agent sends the signal only after that
// line is there. chain=False: the signal is a real-time one nobody else uses,
// whose default action would end the process. The variables are removed, so
// that the worker's own children (DataLoader workers) do not write to the
// same file. Windows has no faulthandler.register: nothing happens there.
// The user's script is unchanged: the runner that follows runs it as
// `python SCRIPT` or `python -m MODULE` would (runpy, __main__, sys.argv,
// sys.path[0]). Limits: a thread stuck in C code holding the GIL still dumps
// (faulthandler writes from the signal handler, without the GIL), but only
// its Python frames; the C frames are not shown for Python workers.
constexpr char kStacksPrelude[] =
    "import os as _mo, sys as _ms\n"
    "def _muster_stacks():\n"
    "    p = _mo.environ.pop('MUSTER_STACKS_FILE', '')\n"
    "    s = _mo.environ.pop('MUSTER_STACKS_SIGNAL', '')\n"
    "    try:\n"
    "        import faulthandler, threading\n"
    "        if not p or not s or not hasattr(faulthandler, 'register'):\n"
    "            return\n"
    "        f = open(p, 'a', buffering=1)\n"
    "        faulthandler.register(int(s), file=f, all_threads=True,\n"
    "                              chain=False)\n"
    "        _ms._muster_stacks_file = f\n"
    "        f.write('muster-stacks-ready main=%x\\n' %\n"
    "                threading.main_thread().ident)\n"
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
  if (python_interpreter.empty() || platform::StacksSignal() == 0 ||
      program.size() < 3 || program[0] != python_interpreter ||
      program[1] != "-u")
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
