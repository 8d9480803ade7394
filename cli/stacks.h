// `muster stacks --rdzv-endpoint=H:P JOB [--json]`: where every worker of a
// running job is, now: musterd relays the request to the job's agents, each
// reads its workers' stacks (native: libdwfl; Python: the interpreter's own
// dump), and the answer groups ranks with identical main-thread stacks,
// largest group first, marking the odd ones out. The job runs on.
#ifndef MUSTER_CLI_STACKS_H_
#define MUSTER_CLI_STACKS_H_

#include <map>
#include <string>
#include <vector>

namespace muster::cli {

// args are the words after "stacks". Exit status: 0 when every agent
// answered, 1 when some did not (the output names them) or the job is
// unknown, 2 for bad flags or credentials, 3 when musterd cannot be reached.
int RunStacks(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env);

}  // namespace muster::cli

#endif  // MUSTER_CLI_STACKS_H_
