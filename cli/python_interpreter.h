// The workers' Python interpreter, resolved once at start-up.
//
// torchrun runs Python workers with its own interpreter (sys.executable);
// muster is no Python program, so `python3` means whatever PATH finds. On a
// machine with pyenv that is a shim: a shell script that picks an interpreter
// per directory, rewrites the workers' PATH and adds PYENV_* variables. Asking
// the interpreter for sys.executable once, before any worker starts, turns a
// shim into the interpreter it runs; every worker of every round then runs that
// one, and the launcher says which.
#ifndef MUSTER_CLI_PYTHON_INTERPRETER_H_
#define MUSTER_CLI_PYTHON_INTERPRETER_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/agent/config.h"

namespace muster::cli {

// What one start of the interpreter tells.
struct PythonFacts {
  // sys.executable: a virtual environment's python stays what it is (not its
  // base).
  std::string executable;
  // Whether it imports a package `muster` with muster.torch by itself
  // (installed, or on the user's PYTHONPATH; the current directory does not
  // count).
  bool finds_muster = false;
};

// Runs `python -c '...'` with `env` once and returns what it prints: its
// absolute path and whether it finds `muster`. Blocks up to `timeout` (the
// child is killed then). Errors: FAILED_PRECONDITION naming `python` when it
// cannot be started, exits non-zero, or prints no absolute path.
absl::StatusOr<PythonFacts> ResolvePython(
    const std::string& python, const std::map<std::string, std::string>& env,
    absl::Duration timeout);

// When `config` runs PROGRAM through Python, resolves its interpreter with
// ResolvePython and puts the result into config->program[0] and
// config->python_interpreter. Returns the line the launcher prints ("workers
// run Python /usr/bin/python3.11 (python3 from PATH, via
// /root/.pyenv/shims/python3)..."), or "" when PROGRAM is not run through
// Python. A failure to resolve keeps the interpreter as given and says so in
// the line (CheckProgram reports one that does not exist). `finds_muster`
// (may be null) gets whether the interpreter imports `muster` by itself;
// false when PROGRAM is not run through Python or the probe failed.
std::string ResolvePythonInterpreter(
    agent::AgentConfig* config, const std::map<std::string, std::string>& env,
    bool* finds_muster = nullptr);

// The directory of the launcher's own Python package (import muster.torch):
// <directory of the launcher>/../lib/muster/python, the same in the build
// tree and under every install prefix (/usr/lib/muster/python from the .deb).
// It holds the package `muster` and nothing else, so that putting it on a
// worker's path adds no other package: a virtual environment's torch and
// numpy are never shadowed by the system's. "" when that directory holds no
// muster/torch.py (a launcher built without it).
std::string MusterPythonDir(const std::string& launcher_path);

// The workers' PYTHONPATH so that `import muster.torch` works with no setup,
// or nullopt to leave it as it is. `dir` (MusterPythonDir) goes last, after
// the user's entries, unless the workers run Python that finds `muster`
// itself (`runs_python` and `finds_muster`: installed, or on the user's
// path); a program not run through Python (--no-python python3 ...: no
// interpreter to ask) gets it too. Nothing when `dir` is empty or already
// listed.
std::optional<std::string> WorkerPythonPath(
    const std::optional<std::string>& current, const std::string& dir,
    bool runs_python, bool finds_muster);

}  // namespace muster::cli

#endif  // MUSTER_CLI_PYTHON_INTERPRETER_H_
