// musterd's console on --http-listen: the page (/, /jobs/<id>, /console/*,
// built into musterd from rendezvous/console/) and the API it reads
// (/api/v1/...): the Coordinator's status as JSON, behind the same tokens as
// GetStatus. No transport here: the HTTP server hands each request to these
// functions (server.cc wires them).
//
// The page holds no data: it is served to anyone, and asks the API (with the
// token the user signs in with) for everything it shows. It runs under a
// strict Content-Security-Policy: scripts, styles and requests from musterd
// itself only, no inline script, no framing.
//
//   GET /api/v1/cluster    this musterd: version, whether it leads (replicas:
//                          which one does, and each etcd member's health),
//                          jobs visible to the caller,
//                          agents connected, and counters since the start
//                          (joins, rounds, Store ops) the page turns into
//                          rates
//   GET /api/v1/jobs       one page of jobs (the GetStatus page as JSON):
//                          ?page_size=N (1..10000, default 1000)
//                          &page_token=T (next_page_token of the last page)
//                          &state=RUNNING (OPEN, RUNNING, SUCCEEDED, FAILED)
//                          &q=TEXT (jobs whose id contains TEXT)
//   GET /api/v1/jobs/<id>  one job; 404 when musterd knows no such job
//   GET /api/v1/jobs/<id>/stacks?timeout_ms=N
//                          the stacks of the job's workers now, grouped as
//                          `muster stacks --json` groups them (the odd ranks
//                          out marked); asks the agents and waits up to N ms
//                          (default 5000, at most 60000) for their answers.
//                          The one route that does something: it reads, and
//                          changes nothing.
//
// Who sees what (docs/console.md): `Authorization: Bearer TOKEN`; the admin
// token sees every job, a job's token its job only, no token the jobs started
// without one (none under --require-token). Answers: 200 JSON; 400 a bad
// parameter; 401 no or a malformed credential where one is needed (with
// WWW-Authenticate); 403 a credential that is not the job's; 404; 503 on a
// replica that does not lead (the leader named). Error bodies are JSON:
// {"error": {"code": 401, "message": "..."}}; no message holds a secret.
#ifndef MUSTER_RENDEZVOUS_SRC_CONSOLE_API_H_
#define MUSTER_RENDEZVOUS_SRC_CONSOLE_API_H_

#include <functional>
#include <vector>

#include "muster/common/http_server.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/rendezvous/replica_options.h"

namespace muster::rendezvous {

class LeaderGate;
class RpcMetrics;
class StacksRelay;

// The prefix the console API is served under.
inline constexpr char kConsoleApiPrefix[] = "/api/v1/";
// The page's routes besides "/".
inline constexpr char kConsoleJobPrefix[] = "/jobs/";
inline constexpr char kConsoleFilePrefix[] = "/console/";
// The policy every page answer carries.
inline constexpr char kConsoleContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";

class ConsoleApi {
 public:
  // All must outlive it; gate may be null (a musterd without replicas),
  // stacks too (no stacks route).
  // etcd_health: the etcd members' health in replica mode (empty otherwise),
  // shown on the cluster page; may be unset.
  ConsoleApi(const Coordinator* coordinator, const JobAuthRegistry* auth,
             const LeaderGate* gate, StacksRelay* stacks,
             const RpcMetrics* metrics,
             std::function<std::vector<EtcdMemberHealth>()> etcd_health = {})
      : coordinator_(coordinator),
        auth_(auth),
        gate_(gate),
        stacks_(stacks),
        metrics_(metrics),
        etcd_health_(std::move(etcd_health)) {}

  // Any path under kConsoleApiPrefix. Thread-safe.
  HttpResponse Serve(const HttpRequest& request) const;
  // Whether the request carries musterd's admin token as a bearer token.
  static bool IsAdmin(const JobAuthRegistry& auth, const HttpRequest& request);
  // The page: "/", "/jobs/<id>" (the same page; it reads the path) and
  // "/console/<file>". Thread-safe.
  static HttpResponse ServePage(const HttpRequest& request);

 private:
  HttpResponse Cluster(const Credential& credential) const;
  HttpResponse Jobs(const HttpRequest& request,
                    const Credential& credential) const;
  HttpResponse Job(const std::string& job_id,
                   const Credential& credential) const;
  HttpResponse Stacks(const std::string& job_id, const HttpRequest& request,
                      const Credential& credential) const;

  const Coordinator* coordinator_;
  const JobAuthRegistry* auth_;
  const LeaderGate* gate_;
  StacksRelay* stacks_;
  const RpcMetrics* metrics_;
  const std::function<std::vector<EtcdMemberHealth>()> etcd_health_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_CONSOLE_API_H_
