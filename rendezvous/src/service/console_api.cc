#include "rendezvous/src/service/console_api.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "muster/common/embedded_file.h"
#include "muster/rendezvous/stack_groups.h"
#include "muster/rendezvous/status_json.h"
#include "nlohmann/json.hpp"
#include "rendezvous/src/core/status_page.h"
#include "rendezvous/src/service/leader_gate.h"
#include "rendezvous/src/service/metrics.h"
#include "rendezvous/src/service/stacks_relay.h"

namespace muster::rendezvous {
namespace {

constexpr char kJson[] = "application/json; charset=utf-8";
// A page waits this long for the agents unless it asks otherwise.
constexpr absl::Duration kConsoleStacksTimeout = absl::Seconds(5);

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

// The message is built by musterd (it names the job and the fix, never a
// secret); nlohmann escapes it as JSON.
HttpResponse Error(const absl::Status& status) {
  const int code = HttpStatusOf(status);
  nlohmann::json body = {
      {"error", {{"code", code}, {"message", std::string(status.message())}}}};
  HttpResponse r{code, kJson, body.dump(2) + "\n"};
  if (code == 401) {
    r.headers.push_back({"WWW-Authenticate", "Bearer realm=\"musterd\""});
  }
  return r;
}

// The request's credential: the Authorization header's. Browsers and curl
// send one value; an empty header counts as none.
Credential CredentialOf(const HttpRequest& request) {
  const std::string value = request.Header("authorization");
  if (value.empty()) return Credential();
  return ParseAuthorization(&value, 1);
}

const char* const kStates[] = {"OPEN", "RUNNING", "SUCCEEDED", "FAILED"};

const char* ContentTypeOf(absl::string_view path) {
  if (absl::EndsWith(path, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(path, ".css")) return "text/css; charset=utf-8";
  return "text/html; charset=utf-8";
}

}  // namespace

// cmake/EmbedFiles.cmake writes them (rendezvous/CMakeLists.txt).
extern const EmbeddedFile kConsoleFiles[];
extern const size_t kConsoleFiles_count;

HttpResponse ConsoleApi::ServePage(const HttpRequest& request) {
  // Every path of the page is the one page; its script reads the path.
  const std::string file = absl::StartsWith(request.path, kConsoleFilePrefix)
                               ? request.path
                               : std::string("/");
  for (size_t i = 0; i < kConsoleFiles_count; ++i) {
    if (file != kConsoleFiles[i].path) continue;
    return HttpResponse{
        200,
        ContentTypeOf(file),
        std::string(reinterpret_cast<const char*>(kConsoleFiles[i].data),
                    kConsoleFiles[i].size),
        {{"Content-Security-Policy", kConsoleContentSecurityPolicy},
         {"X-Frame-Options", "DENY"}}};
  }
  return HttpResponse{404, "text/plain; charset=utf-8",
                      absl::StrCat("no such file: ", request.path, "\n")};
}

bool ConsoleApi::IsAdmin(const JobAuthRegistry& auth,
                         const HttpRequest& request) {
  const Credential credential = CredentialOf(request);
  const std::optional<Digest>& admin = auth.policy().admin_digest;
  return credential.kind == Credential::Kind::kBearer && admin.has_value() &&
         SecretEquals(HashSecret(credential.secret), *admin);
}

HttpResponse ConsoleApi::Serve(const HttpRequest& request) const {
  const Credential credential = CredentialOf(request);
  if (credential.kind == Credential::Kind::kMalformed) {
    return Error(absl::UnauthenticatedError(
        "the Authorization header is not \"Bearer TOKEN\": send musterd's "
        "admin token or the job's token as a bearer token"));
  }
  const std::string rest = request.path.substr(sizeof(kConsoleApiPrefix) - 1);
  // Every replica says whether it leads; only the leader knows jobs.
  if (rest == "cluster") return Cluster(credential);
  if (gate_ != nullptr && !gate_->serving()) return Error(gate_->Check());
  if (rest == "jobs") return Jobs(request, credential);
  if (absl::StartsWith(rest, "jobs/") && rest.size() > 5) {
    std::string job = rest.substr(5);
    if (absl::EndsWith(job, "/stacks") && job.size() > 7) {
      return Stacks(job.substr(0, job.size() - 7), request, credential);
    }
    return Job(job, credential);
  }
  return Error(absl::NotFoundError(absl::StrCat(
      "no API at ", request.path, ": try /api/v1/jobs or /api/v1/jobs/<id>")));
}

HttpResponse ConsoleApi::Cluster(const Credential& credential) const {
  if (credential.kind == Credential::Kind::kNone &&
      auth_->policy().require_token) {
    return Error(absl::UnauthenticatedError(
        "musterd runs with --require-token: send the admin token or a job's "
        "token as \"Authorization: Bearer TOKEN\""));
  }
  const bool serving = gate_ == nullptr || gate_->serving();
  nlohmann::json out = {
      {"server_version", MUSTER_VERSION},
      {"serving", serving},
      {"leads", gate_ == nullptr || gate_->leads()},
      // "" on the leader; a standby's says who leads (never a secret).
      {"replica_status",
       gate_ == nullptr ? "" : std::string(gate_->Check().message())},
      {"epoch", gate_ == nullptr ? 0 : gate_->epoch()},
      {"time_ms", absl::ToUnixMillis(absl::Now())},
  };
  if (serving) {
    // What the caller may see, counted as a page would count it.
    StatusPageQuery query;
    query.page_size = 1;
    query.visible = [this, &credential](absl::string_view job_id) {
      return auth_->Check(credential, Access::kStatus, job_id).ok();
    };
    out["jobs"] = coordinator_->StatusPage(query).total_jobs();
    // Server-wide activity, for every caller: counts, no job's details.
    out["agents_connected"] = coordinator_->ConnectedAgents();
    out["joins_total"] = coordinator_->JoinsAccepted();
    out["rounds_total"] = coordinator_->RoundsReady();
    out["store_ops_total"] = metrics_ != nullptr ? metrics_->StoreOps() : 0;
  }
  // Replicas: etcd as this replica sees it (a standby's view too: its own
  // connection to etcd is what keeps it ready to take over).
  if (etcd_health_) {
    const std::vector<EtcdMemberHealth> members = etcd_health_();
    if (!members.empty()) {
      nlohmann::json etcd = nlohmann::json::array();
      for (const EtcdMemberHealth& m : members) {
        etcd.push_back({{"endpoint", m.endpoint},
                        {"healthy", m.healthy},
                        {"error", m.error},
                        {"version", m.version},
                        {"leader", m.leader},
                        {"db_size_bytes", m.db_size_bytes},
                        {"raft_term", m.raft_term}});
      }
      out["etcd"] = std::move(etcd);
    }
  }
  return HttpResponse{200, kJson, out.dump(2) + "\n"};
}

HttpResponse ConsoleApi::Jobs(const HttpRequest& request,
                              const Credential& credential) const {
  v1::GetStatusRequest page;
  const std::string size = request.QueryParam("page_size");
  if (!size.empty()) {
    int value = 0;
    if (!absl::SimpleAtoi(size, &value)) {
      return Error(absl::InvalidArgumentError(
          absl::StrCat("page_size=", size, " is not a number: give 1 to ",
                       kMaxStatusPageSize)));
    }
    page.set_page_size(value);
  }
  page.set_page_token(request.QueryParam("page_token"));
  absl::StatusOr<StatusPageQuery> query = StatusPageQueryOf(page);
  if (!query.ok()) return Error(query.status());

  const std::string state = request.QueryParam("state");
  if (!state.empty()) {
    bool known = false;
    for (const char* s : kStates) known = known || state == s;
    if (!known) {
      return Error(absl::InvalidArgumentError(
          absl::StrCat("state=", state,
                       " is not a job state: give OPEN, RUNNING, SUCCEEDED or "
                       "FAILED")));
    }
  }
  // Under --require-token nothing is shown to a caller without a token, not
  // even that jobs exist.
  if (credential.kind == Credential::Kind::kNone &&
      auth_->policy().require_token) {
    return Error(absl::UnauthenticatedError(
        "musterd runs with --require-token: send the admin token (every job) "
        "or a job's token (that job) as \"Authorization: Bearer TOKEN\""));
  }
  const std::string text = request.QueryParam("q");
  query->visible = [this, &credential, &text](absl::string_view job_id) {
    return absl::StrContains(job_id, text) &&
           auth_->Check(credential, Access::kStatus, job_id).ok();
  };
  v1::GetStatusResponse out = coordinator_->StatusPage(*query);
  if (!state.empty()) {
    // The state is the Coordinator's to read, not the visibility filter's
    // (it runs under the Coordinator's lock with the job id only): filter
    // the page after, so a page may hold fewer than page_size jobs.
    auto* jobs = out.mutable_jobs();
    for (int i = jobs->size() - 1; i >= 0; --i) {
      if (jobs->Get(i).state() != state) jobs->DeleteSubrange(i, 1);
    }
  }
  out.set_server_version(MUSTER_VERSION);
  return HttpResponse{200, kJson, StatusJson(out)};
}

HttpResponse ConsoleApi::Job(const std::string& job_id,
                             const Credential& credential) const {
  absl::Status allowed = auth_->Check(credential, Access::kStatus, job_id);
  if (!allowed.ok()) return Error(allowed);
  v1::GetStatusResponse out = coordinator_->Status(job_id);
  if (out.jobs_size() == 0) {
    return Error(absl::NotFoundError(
        absl::StrCat("musterd knows no job '", job_id,
                     "': it never joined, or it ended and was forgotten")));
  }
  return HttpResponse{200, kJson, StatusJson(out.jobs(0))};
}

HttpResponse ConsoleApi::Stacks(const std::string& job_id,
                                const HttpRequest& request,
                                const Credential& credential) const {
  if (stacks_ == nullptr) {
    return Error(absl::UnimplementedError("this server relays no stacks"));
  }
  absl::Status allowed = auth_->Check(credential, Access::kStatus, job_id);
  if (!allowed.ok()) return Error(allowed);
  absl::Duration timeout = kConsoleStacksTimeout;
  if (const std::string ms = request.QueryParam("timeout_ms"); !ms.empty()) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(ms, &value) || value < 1 ||
        absl::Milliseconds(value) > kMaxStacksTimeout) {
      return Error(absl::InvalidArgumentError(
          absl::StrCat("timeout_ms=", ms, ": give 1 to ",
                       absl::ToInt64Milliseconds(kMaxStacksTimeout))));
    }
    timeout = absl::Milliseconds(value);
  }
  const v1::GetStatusResponse status = coordinator_->Status(job_id);
  if (status.jobs_size() == 0) {
    return Error(absl::NotFoundError(
        absl::StrCat("musterd knows no job '", job_id, "'")));
  }
  std::vector<std::pair<std::string, std::string>> members;
  for (const v1::Peer& p : status.jobs(0).members())
    members.emplace_back(p.hostname(), p.node_id());
  // The relay answers on another thread by the deadline (it names agents
  // that did not answer); this HTTP thread waits for it.
  auto result =
      std::make_shared<std::pair<absl::Notification, v1::GetStacksResponse>>();
  stacks_->Gather(job_id, members, timeout,
                  [result](v1::GetStacksResponse gathered) {
                    result->second = std::move(gathered);
                    result->first.Notify();
                  });
  if (!result->first.WaitForNotificationWithTimeout(timeout +
                                                    absl::Seconds(5))) {
    return Error(absl::DeadlineExceededError(
        "the agents' stacks did not come back in time: try again"));
  }
  const v1::GetStacksResponse& got = result->second;
  std::vector<v1::RankStacks> ranks(got.ranks().begin(), got.ranks().end());
  std::vector<std::string> missing(got.missing().begin(), got.missing().end());
  return HttpResponse{200, kJson,
                      StackGroupsJson(job_id, ranks, missing).dump(2) + "\n"};
}

}  // namespace muster::rendezvous
