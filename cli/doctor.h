// `muster doctor`: names why the nodes of a job cannot talk, and prints the
// fix.
//
//   muster doctor --rdzv-endpoint=node0:29400 --peer node1 --ports 29400-29510
//   muster doctor --master-addr=10.0.0.5 --master-port=29500 --json
//
// The checks, the facts they read, the collectors and the rendering are the
// doctor module (doctor/include/muster/doctor/); this is its command line.
#ifndef MUSTER_CLI_DOCTOR_H_
#define MUSTER_CLI_DOCTOR_H_

#include <map>
#include <string>
#include <vector>

namespace muster::cli {

// Runs `muster doctor ARGS...` (`args` without "doctor"; `env` is the
// environment). Prints the report (a table, or JSON with --json) to stdout.
// Returns 0 when no check failed, 1 when one did, 2 for a bad command line.
// Blocks for the checks: about --timeout for the probes (run concurrently),
// and at most a few seconds for each external firewall command.
int RunDoctor(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env);

}  // namespace muster::cli

#endif  // MUSTER_CLI_DOCTOR_H_
