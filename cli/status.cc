#include "cli/status.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/security_flags.h"
#include "cli/subcommand.h"
#include "muster/agent/exit_codes.h"
#include "muster/common/duration.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/status_json.h"

namespace muster::cli {
namespace {

std::string Ranks(const v1::Peer& p) {
  if (p.rank_offset() < 0) return "-";
  if (p.local_world_size() == 1) return absl::StrCat(p.rank_offset());
  return absl::StrCat(p.rank_offset(), "-",
                      p.rank_offset() + p.local_world_size() - 1);
}

void AppendPeers(std::string* out, const char* title,
                 const google::protobuf::RepeatedPtrField<v1::Peer>& peers) {
  if (peers.empty()) return;
  absl::StrAppend(out, "  ", title, ":\n");
  absl::StrAppendFormat(out, "    %-6s %-24s %-16s %-8s %s\n", "GROUP", "HOST",
                        "ADDRESS", "RANKS", "NODE ID");
  for (const v1::Peer& p : peers) {
    absl::StrAppendFormat(
        out, "    %-6s %-24s %-16s %-8s %s\n",
        p.group_rank() < 0 ? "-" : absl::StrCat(p.group_rank()), p.hostname(),
        p.advertised_addr(), Ranks(p), p.node_id());
  }
}

// "12:34:56" in `tz`; "" for 0 (not set).
std::string ClockTime(int64_t unix_ms, absl::TimeZone tz) {
  if (unix_ms <= 0) return "";
  return absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(unix_ms), tz);
}

// The job's stragglers and excluded nodes, and its straggler policy when it
// is not the default one (report under 0.7): nothing at all for the usual
// job, so that the listing stays short.
void AppendStragglers(std::string* out, const v1::JobStatus& job,
                      absl::TimeZone tz) {
  const std::string action =
      job.straggler_action().empty() ? "report" : job.straggler_action();
  const double threshold =
      job.straggler_threshold() > 0 ? job.straggler_threshold() : 0.7;
  const bool default_policy =
      action == "report" && std::abs(threshold - 0.7) < 1e-9;
  const std::string policy =
      absl::StrFormat("action %s, threshold %g", action, threshold);
  if (!job.stragglers().empty()) {
    absl::StrAppend(out, "  stragglers (", policy, "):\n");
    for (const v1::Straggler& st : job.stragglers()) {
      const std::string since = ClockTime(st.since(), tz);
      absl::StrAppendFormat(
          out, "    rank %d on %s (node %s): speed %.2f of the median%s\n",
          st.rank(), st.hostname().empty() ? "?" : st.hostname(), st.node_id(),
          st.score(), since.empty() ? "" : absl::StrCat(" since ", since));
    }
  } else if (!default_policy) {
    absl::StrAppend(out, "  stragglers: none (", policy, ")\n");
  }
  if (!job.excluded().empty()) {
    absl::StrAppend(out, "  excluded:\n");
    for (const v1::ExcludedNode& x : job.excluded()) {
      const std::string until = ClockTime(x.until_unix_ms(), tz);
      absl::StrAppend(
          out, "    node ", x.node_id(),
          x.hostname().empty() ? "" : absl::StrCat(" (", x.hostname(), ")"),
          until.empty() ? "" : absl::StrCat(" until ", until), ": ",
          x.reason().empty() ? "no reason given" : x.reason(), "\n");
    }
  }
}

// "3.4 KiB", "256 MiB": binary units, as the Store's limits are set.
std::string Bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(n, " B")
                : absl::StrFormat("%.1f %s", v, units[u]);
}

// One job's answer: its round's Store use against musterd's limits, with the
// share of the nearer one.
void AppendStore(std::string* out, const v1::JobStatus& job) {
  if (!job.has_store()) return;
  const v1::StoreUsage& s = job.store();
  auto share = [](int64_t used, int64_t max) {
    return max > 0
               ? 100.0 * static_cast<double>(used) / static_cast<double>(max)
               : 0.0;
  };
  absl::StrAppendFormat(
      out,
      "  store (%s): %d keys of %d, %s of %s (%.0f%% of the nearer limit)\n",
      s.prefix(), s.keys(), s.max_keys(), Bytes(s.bytes()),
      Bytes(s.max_bytes()),
      std::max(share(s.keys(), s.max_keys()), share(s.bytes(), s.max_bytes())));
}

}  // namespace

std::string FormatStatus(const v1::GetStatusResponse& status,
                         const std::string& endpoint, absl::TimeZone tz) {
  // total_jobs: the server's count (0 from a musterd without paging).
  const int64_t total =
      std::max<int64_t>(status.total_jobs(), status.jobs_size());
  std::string out = absl::StrCat(
      "musterd at ", endpoint,
      status.server_version().empty()
          ? std::string()
          : absl::StrCat(" (version ", status.server_version(), ")"),
      ": ", total, total == 1 ? " job" : " jobs",
      total == status.jobs_size()
          ? std::string()
          : absl::StrCat(" (", status.jobs_size(), " listed; ",
                         total - status.jobs_size(),
                         " more: jobs came or went while paging, or the "
                         "listing stopped early; run it again)"),
      "\n");
  for (const v1::JobStatus& job : status.jobs()) {
    absl::StrAppendFormat(
        &out,
        "\njob %s: %s, round %d, %d node%s (--nnodes=%d:%d), restarts %d/%d\n",
        job.job_id(), job.state(), job.round(), job.members_size(),
        job.members_size() == 1 ? "" : "s", job.min_nodes(), job.max_nodes(),
        job.restart_count(), job.max_restarts());
    AppendPeers(&out, "members", job.members());
    AppendPeers(&out, "waiting", job.waiting());
    if (job.members_omitted() > 0 || job.waiting_omitted() > 0) {
      absl::StrAppend(
          &out, "  not listed (response size bound): ", job.members_omitted(),
          " more members, ", job.waiting_omitted(), " more waiting\n");
    }
    if (!job.last_failure().empty()) {
      absl::StrAppend(&out, "  last failure: ", job.last_failure(), "\n");
    }
    AppendStragglers(&out, job, tz);
    AppendStore(&out, job);
  }
  return out;
}

int RunStatus(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env) {
  CLI::App app("muster status: the jobs a rendezvous server knows",
               "muster status");
  ServerFlags server;
  std::string job;
  bool json = false;
  std::string timeout_text = "5";
  AddEndpointFlag(app, env,
                  "HOST:PORT of musterd, or its replicas H1:P1,H2:P2 (the "
                  "leader answers; a standby names it)",
                  &server);
  app.add_option("job", job, "Only this job id");
  app.add_flag("--json", json, "Print JSON (the GetStatusResponse message)");
  int page_size = 0;
  app.add_option("--page-size", page_size,
                 "Jobs per GetStatus call, 1 to 10000 (0: the server's "
                 "default, 1000); every page is fetched and printed")
      ->capture_default_str();
  app.add_option("--timeout", timeout_text,
                 "Seconds (or a duration: 500ms, 1m) to wait for the server")
      ->capture_default_str();
  AddSecurityFlags(app, env,
                   "a job's token, or musterd's admin token (every job); "
                   "default: MUSTER_RDZV_TOKEN",
                   &server);
  if (std::optional<int> exit = ParseSubcommandArgs(app, args, "muster status",
                                                    agent::kExitConfigError)) {
    return *exit;
  }
  absl::StatusOr<absl::Duration> timeout = ParseDuration(timeout_text);
  if (!timeout.ok() || *timeout <= absl::ZeroDuration()) {
    std::fprintf(stderr,
                 "muster status: --timeout=%s: expected seconds > 0 (5, 0.5) "
                 "or a duration (500ms, 1m)\n",
                 timeout_text.c_str());
    return agent::kExitConfigError;
  }
  std::optional<store::ClientSecurity> security =
      SecurityOrComplain(server, env, "muster status");
  if (!security) return agent::kExitConfigError;
  auto status = rendezvous::QueryStatus(server.endpoint, job, *timeout,
                                        *security, page_size);
  if (!status.ok()) {
    std::fprintf(stderr, "muster status: %s\n",
                 std::string(status.status().message()).c_str());
    const absl::StatusCode code = status.status().code();
    return code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kUnauthenticated ||
                   code == absl::StatusCode::kPermissionDenied ||
                   code == absl::StatusCode::kNotFound
               ? agent::kExitConfigError
               : agent::kExitUnavailable;
  }
  if (json) {
    std::fputs(rendezvous::StatusJson(*status).c_str(), stdout);
  } else {
    std::fputs(FormatStatus(*status, server.endpoint).c_str(), stdout);
  }
  if (!job.empty() && status->jobs_size() == 0) {
    std::fprintf(stderr, "muster status: the server at %s knows no job '%s'\n",
                 server.endpoint.c_str(), job.c_str());
    return agent::kExitJobFailed;
  }
  return 0;
}

}  // namespace muster::cli
