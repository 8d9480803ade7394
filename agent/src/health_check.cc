#include "agent/src/health_check.h"

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "agent/src/elastic_agent_impl.h"
#include "muster/common/logging.h"
#include "muster/platform/env.h"
#include "muster/platform/shell.h"

namespace muster::agent {

HealthCheckResult RunHealthCheck(const std::string& command,
                                 const std::map<std::string, std::string>& env,
                                 absl::Duration timeout,
                                 platform::ToolRunner& runner) {
  HealthCheckResult result;
  const absl::Time start = absl::Now();
  platform::ToolResult& ran = result.ran;
  ran = runner.Run(platform::ShellArgv(command), env, timeout);
  result.took = absl::Now() - start;
  result.ok = ran.found && !ran.timed_out && ran.exit_code == 0;
  if (!ran.found) {
    ran.exit_code = 127;
    ran.output = absl::StrCat("the shell (", platform::ShellArgv("")[0],
                              ") was not found\n", ran.output);
  }
  return result;
}

std::string DescribeHealthCheckFailure(const std::string& command,
                                       absl::Duration timeout,
                                       const HealthCheckResult& result) {
  std::string out = absl::StrCat(
      "health check failed: `", command, "` ",
      result.ran.timed_out
          ? absl::StrCat("was still running after --health-check-timeout=",
                         absl::FormatDuration(timeout),
                         " and was killed (its whole process group)")
          : absl::StrCat("exited with code ", result.ran.exit_code),
      "; this node stays out of the job's rounds and the agent exits ",
      "(the others go on without it when the job is elastic)\n");
  constexpr size_t kMaxOutput = 8192;
  absl::string_view text =
      absl::StripTrailingAsciiWhitespace(result.ran.output);
  if (text.size() > kMaxOutput) text = text.substr(text.size() - kMaxOutput);
  if (text.empty()) {
    absl::StrAppend(&out, "  (the check printed nothing)\n");
  } else {
    absl::StrAppend(&out, "  its output:\n");
    for (absl::string_view line : absl::StrSplit(text, '\n'))
      absl::StrAppend(&out, "    ", line, "\n");
  }
  return out;
}

std::string HealthCheckLeaveReason(const HealthCheckResult& result) {
  std::string reason = result.ran.timed_out
                           ? std::string("health check timed out")
                           : absl::StrCat("health check failed (exit code ",
                                          result.ran.exit_code, ")");
  // The check's last line usually says what is wrong ("GPU 0 fell off the
  // bus"); musterd shows it with the exclusion in `muster status`.
  absl::string_view text =
      absl::StripTrailingAsciiWhitespace(result.ran.output);
  if (size_t nl = text.rfind('\n'); nl != absl::string_view::npos) {
    text.remove_prefix(nl + 1);
  }
  text = absl::StripAsciiWhitespace(text);
  constexpr size_t kMaxLine = 200;
  if (!text.empty()) {
    absl::StrAppend(&reason, ": ", text.substr(0, kMaxLine),
                    text.size() > kMaxLine ? "..." : "");
  }
  return reason;
}

// ElasticAgent's hook (elastic_agent_impl.h): before the first Join and each
// rejoin.

int ElasticAgent::Impl::CheckNodeHealth(const char* when) {
  if (config_.health_check.empty()) return -1;
  MUSTER_LOG(INFO) << "health check " << when << ": " << config_.health_check;
  const HealthCheckResult result = RunHealthCheck(
      config_.health_check, CurrentEnvironment(), config_.health_check_timeout,
      platform::SystemToolRunner());
  if (result.ok) {
    MUSTER_LOG(DEBUG) << "health check passed in "
                      << absl::FormatDuration(
                             absl::Trunc(result.took, absl::Milliseconds(1)));
    return -1;
  }
  const std::string text = DescribeHealthCheckFailure(
      config_.health_check, config_.health_check_timeout, result);
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  // Leave at once (a Leave is a lost node to musterd): the round forms or
  // goes on without this node instead of waiting for its heartbeats to end.
  // musterd excludes the node from the job for its --exclude-cooldown: a node
  // that failed its check should not come back at the next round only
  // because the check passed once.
  if (client_ != nullptr) {
    v1::Leave leave;
    leave.set_reason(HealthCheckLeaveReason(result));
    leave.set_health_check_failed(true);
    client_->CloseWith(leave);
  }
  return kExitHealthCheckFailed;
}

}  // namespace muster::agent
