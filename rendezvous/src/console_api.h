// musterd's console API (/api/v1/...) on --http-listen: the Coordinator's
// status as JSON, behind the same tokens as GetStatus. No transport here: the
// HTTP server hands each request to these functions (server.cc wires them).
//
//   GET /api/v1/jobs       one page of jobs (the GetStatus page as JSON):
//                          ?page_size=N (1..10000, default 1000)
//                          &page_token=T (next_page_token of the last page)
//                          &state=RUNNING (OPEN, RUNNING, SUCCEEDED, FAILED)
//                          &q=TEXT (jobs whose id contains TEXT)
//   GET /api/v1/jobs/<id>  one job; 404 when musterd knows no such job
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

#include "muster/common/http_server.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"

namespace muster::rendezvous {

class LeaderGate;

// The prefix the console API is served under.
inline constexpr char kConsoleApiPrefix[] = "/api/v1/";

class ConsoleApi {
 public:
  // All must outlive it; gate may be null (a musterd without replicas).
  ConsoleApi(const Coordinator* coordinator, const JobAuthRegistry* auth,
             const LeaderGate* gate)
      : coordinator_(coordinator), auth_(auth), gate_(gate) {}

  // Any path under kConsoleApiPrefix. Thread-safe.
  HttpResponse Serve(const HttpRequest& request) const;

 private:
  HttpResponse Jobs(const HttpRequest& request,
                    const Credential& credential) const;
  HttpResponse Job(const std::string& job_id,
                   const Credential& credential) const;

  const Coordinator* coordinator_;
  const JobAuthRegistry* auth_;
  const LeaderGate* gate_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_CONSOLE_API_H_
