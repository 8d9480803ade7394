// What `muster doctor` finds: one Check a concern, each ending PASS, INFO,
// WARN or FAIL with its evidence and its fix, gathered in a Report that
// render.h prints as a table or JSON.
#ifndef MUSTER_DOCTOR_REPORT_H_
#define MUSTER_DOCTOR_REPORT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace muster::doctor {

enum class Status { kPass, kInfo, kWarn, kFail };
// "PASS", "INFO", "WARN", "FAIL".
absl::string_view StatusName(Status status);

// The finding of one check.
struct Check {
  std::string id;     // a stable key: "endpoint", "master", "peer", "ports",
                      // "hostname", "interfaces", "firewall", "security",
                      // "environment", "gpu"
  std::string title;  // what was checked: "master 10.0.0.5:29500"
  Status status = Status::kInfo;
  std::string summary;                // one line: the finding (the cause)
  std::vector<std::string> evidence;  // what was seen
  std::vector<std::string> fix;       // what to do, in sentences
  std::vector<std::string> commands;  // commands that do it, verbatim, for
                                      // the report's target OS
  nlohmann::json data = nlohmann::json::object();  // facts for programs
};

struct Report {
  std::string hostname;
  std::string os;  // what the fix commands are written for: linux | windows
  std::vector<Check> checks;
  // 1 when a check failed, else 0.
  int ExitStatus() const;
};

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_REPORT_H_
