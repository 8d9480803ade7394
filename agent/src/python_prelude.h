// The Python prelude behind `muster stacks` for Python workers: how the agent
// turns the launcher's Python command (`python -u SCRIPT ...`, `python -u -m
// MODULE ...`, `python -u -c CODE ...`, cli/launch_resolve.cc) into one that
// first arranges a faulthandler dump on request (platform::StacksSignal() on
// Linux, the event platform::StacksEventPrefix() + pid on Windows), then runs
// the program as before. Done by the agent when it makes a round's workers,
// so AgentConfig::program stays what the launcher resolved.
#ifndef MUSTER_AGENT_SRC_PYTHON_PRELUDE_H_
#define MUSTER_AGENT_SRC_PYTHON_PRELUDE_H_

#include <map>
#include <string>
#include <vector>

namespace muster::agent {

// `program` with the prelude: {PY, -u, SCRIPT, A...} -> {PY, -u, -c,
// prelude + script runner, SCRIPT, A...}; {PY, -u, -m, MOD, A...} -> {PY, -u,
// -c, prelude + module runner, MOD, A...}; {PY, -u, -c, CODE, A...} -> {PY,
// -u, -c, prelude + CODE, A...}. Anything else (not the launcher's Python
// form, an empty interpreter, MUSTER_PYTHON_STACKS=0 in `env`) comes back
// unchanged, and *applied is false.
std::vector<std::string> WithStacksPrelude(
    const std::vector<std::string>& program,
    const std::string& python_interpreter,
    const std::map<std::string, std::string>& env, bool* applied);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_PYTHON_PRELUDE_H_
