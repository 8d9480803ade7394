#include "cli/doctor_node.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "muster/doctor/checks.h"
#include "muster/doctor/collector.h"
#include "muster/doctor/render.h"

namespace muster::cli {

int RunDoctorNode(const doctor::NodeOptions& options, bool json,
                  const std::string& os,
                  const std::map<std::string, std::string>& env) {
  // The doctor's own collector, with no target to probe: interfaces, the
  // host name and the GPU (libcuda, bounded) as `muster doctor` reads them.
  doctor::Options plan_options;
  plan_options.os = os;
  absl::StatusOr<doctor::Plan> plan = doctor::MakePlan(plan_options);
  if (!plan.ok()) {
    std::fprintf(stderr, "muster doctor --node: %s\n",
                 std::string(plan.status().message()).c_str());
    return 2;
  }
  doctor::Facts facts = doctor::NewSystemCollector()->Collect(*plan, env);
  doctor::NodeFacts node;
  node.gpu = facts.gpu;
  node.interfaces = facts.interfaces;
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(
      options.log_dir.empty() ? "." : options.log_dir, ec);
  if (ec) {
    node.space_error = ec.message();
  } else {
    node.free_bytes = static_cast<int64_t>(space.available);
  }
  const doctor::Report report =
      doctor::DiagnoseNode(options, node, facts.host.hostname, os);
  if (json) {
    std::fputs(doctor::FormatJson(report).c_str(), stdout);
  } else {
    int width = 100;
    int cols = 0;
    if (auto it = env.find("COLUMNS");
        it != env.end() && absl::SimpleAtoi(it->second, &cols) && cols >= 60)
      width = cols;
    std::fputs(doctor::FormatText(report, width).c_str(), stdout);
  }
  std::fflush(stdout);
  return report.ExitStatus();
}

}  // namespace muster::cli
