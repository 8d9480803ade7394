#include "cli/stacks.h"

#include <cstdio>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/security_flags.h"
#include "cli/subcommand.h"
#include "muster/agent/exit_codes.h"
#include "muster/common/duration.h"
#include "muster/rendezvous/stack_groups.h"
#include "muster/rendezvous/stacks_client.h"

namespace muster::cli {

int RunStacks(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env) {
  CLI::App app(
      "muster stacks: where every worker of a running job is now (stacks "
      "grouped by rank; the job runs on)",
      "muster stacks");
  ServerFlags server;
  std::string job;
  bool json = false;
  std::string timeout_text = "5";
  std::string wait_text = "10";
  AddEndpointFlag(app, env, "HOST:PORT of musterd, or its replicas H1:P1,H2:P2",
                  &server);
  app.add_option("job", job, "The job id (--rdzv-id)")->required();
  app.add_flag("--json", json,
               "Print JSON: {\"job\", \"groups\": [{\"ranks\", \"frames\", "
               "...}], \"missing\"}");
  app.add_option("--timeout", timeout_text,
                 "Seconds (or a duration) to wait to connect to musterd")
      ->capture_default_str();
  app.add_option("--wait", wait_text,
                 "How long musterd waits for the agents' answers (at most 60 "
                 "s); agents that did not answer by then are named")
      ->capture_default_str();
  AddSecurityFlags(app, env,
                   "the job's token, or musterd's admin token; default: "
                   "MUSTER_RDZV_TOKEN",
                   &server);
  if (std::optional<int> exit = ParseSubcommandArgs(app, args, "muster stacks",
                                                    agent::kExitConfigError)) {
    return *exit;
  }
  absl::StatusOr<absl::Duration> timeout = ParseDuration(timeout_text);
  absl::StatusOr<absl::Duration> wait = ParseDuration(wait_text);
  if (!timeout.ok() || *timeout <= absl::ZeroDuration() || !wait.ok() ||
      *wait <= absl::ZeroDuration() || *wait > absl::Seconds(60)) {
    std::fprintf(stderr,
                 "muster stacks: --timeout=%s --wait=%s: expected seconds > 0 "
                 "(5, 0.5) or a duration (500ms, 1m); --wait at most 60 s\n",
                 timeout_text.c_str(), wait_text.c_str());
    return agent::kExitConfigError;
  }
  std::optional<store::ClientSecurity> security =
      SecurityOrComplain(server, env, "muster stacks");
  if (!security) return agent::kExitConfigError;
  absl::StatusOr<v1::GetStacksResponse> answer =
      rendezvous::QueryStacks(server.endpoint, job, *timeout, *wait, *security);
  if (!answer.ok()) {
    std::fprintf(stderr, "muster stacks: %s\n",
                 std::string(answer.status().message()).c_str());
    const absl::StatusCode code = answer.status().code();
    if (code == absl::StatusCode::kNotFound) return agent::kExitJobFailed;
    return code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kUnauthenticated ||
                   code == absl::StatusCode::kPermissionDenied
               ? agent::kExitConfigError
               : agent::kExitUnavailable;
  }
  const std::vector<v1::RankStacks> ranks(answer->ranks().begin(),
                                          answer->ranks().end());
  const std::vector<std::string> missing(answer->missing().begin(),
                                         answer->missing().end());
  if (json) {
    std::fputs((rendezvous::StackGroupsJson(job, ranks, missing).dump(2) + "\n")
                   .c_str(),
               stdout);
  } else {
    std::fputs(rendezvous::FormatStackGroups(job, ranks, missing).c_str(),
               stdout);
  }
  return missing.empty() ? 0 : agent::kExitJobFailed;
}

}  // namespace muster::cli
