// The Report as text for people and as JSON for programs. Pure functions.
#ifndef MUSTER_DOCTOR_RENDER_H_
#define MUSTER_DOCTOR_RENDER_H_

#include <string>

#include "muster/doctor/report.h"

namespace muster::doctor {

// The report as an aligned table with evidence and fixes under each row, and
// a count line at the end. `width` wraps prose (commands are never wrapped);
// below 60 counts as 60.
std::string FormatText(const Report& report, int width = 100);
// {"host", "os", "checks": [{"id", "title", "status", "summary", "evidence",
// "fix", "commands", "data"}], "counts": {"pass", "info", "warn", "fail"},
// "exit_status"}, pretty-printed.
std::string FormatJson(const Report& report);

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_RENDER_H_
