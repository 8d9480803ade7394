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
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/agent/config.h"

namespace muster::cli {

// Runs `python -c 'import sys; print(sys.executable)'` with `env` and returns
// the absolute path it prints. A virtual environment's python stays what it is
// (sys.executable names the venv's own, not its base). Blocks up to `timeout`
// (the child is killed then). Errors: FAILED_PRECONDITION naming `python` when
// it cannot be started, exits non-zero, or prints no absolute path.
absl::StatusOr<std::string> ResolvePython(
    const std::string& python, const std::map<std::string, std::string>& env,
    absl::Duration timeout);

// When `config` runs PROGRAM through Python, resolves its interpreter with
// ResolvePython and puts the result into config->program[0] and
// config->python_interpreter. Returns the line the launcher prints ("workers
// run Python /usr/bin/python3.11 (python3 from PATH, via
// /root/.pyenv/shims/python3)..."), or "" when PROGRAM is not run through
// Python. A failure to resolve keeps the interpreter as given and says so in
// the line (CheckProgram reports one that does not exist).
std::string ResolvePythonInterpreter(
    agent::AgentConfig* config, const std::map<std::string, std::string>& env);

}  // namespace muster::cli

#endif  // MUSTER_CLI_PYTHON_INTERPRETER_H_
