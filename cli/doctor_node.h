// `muster doctor --node`: the built-in node checks
// (muster/doctor/node_checks.h) as a report, exit status 1 when one fails: fit
// to be a `--health-check`.
#ifndef MUSTER_CLI_DOCTOR_NODE_H_
#define MUSTER_CLI_DOCTOR_NODE_H_

#include <map>
#include <string>

#include "muster/doctor/node_checks.h"

namespace muster::cli {

int RunDoctorNode(const doctor::NodeOptions& options, bool json,
                  const std::string& os,
                  const std::map<std::string, std::string>& env);

}  // namespace muster::cli

#endif  // MUSTER_CLI_DOCTOR_NODE_H_
