// musterd's console API (/api/v1/jobs, /api/v1/jobs/<id>) on a real server
// over real HTTP: the same JSON as `muster status --json`, and the tokens of
// GetStatus: the admin token sees every job, a job's token its own only, no
// token nothing under --require-token (401), a wrong one 403; worker text is
// JSON-escaped; bad parameters are named.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/server.h"
#include "nlohmann/json.hpp"
#include "tests/testing/http.h"
#include "tests/testing/join.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/tls_certs.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::HttpBody;
using ::muster::testing::HttpGet;
using ::muster::testing::HttpStatusCode;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::NextOfKind;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kOtherToken[] = "console-other-token-0a1b2c3d4e5f6a7b";

std::string Bearer(const std::string& token) {
  return absl::StrCat("Authorization: Bearer ", token, "\r\n");
}

class ConsoleApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.http_listen = "127.0.0.1:0";
    options.require_token = true;
    options.admin_token = testing::kAdminToken;
    server_ = testing::StartLoopbackServer(options);
    ASSERT_NE(server_, nullptr);
    port_ = server_->http_port();
    ASSERT_GT(port_, 0);
    // Two one-node jobs in a RUNNING round, each with its own token.
    a_ = Agent("jobA", testing::kJobToken);
    b_ = Agent("jobB", kOtherToken);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<RendezvousClient> Agent(const std::string& job,
                                          const std::string& token) {
    GrpcClientOptions o;
    o.endpoint = LoopbackEndpoint(server_->port());
    o.security.token = token;
    auto client = NewGrpcRendezvousClient(o);
    absl::Status s =
        client->Start(testing::MakeJoin({.job_id = job,
                                         .node_id = job + "-node",
                                         .hostname = "<b>host</b>",
                                         .advertised_addr = "127.0.0.1",
                                         .master_port = 29500,
                                         .heartbeat_interval_ms = 50,
                                         .heartbeat_timeout_ms = 5000,
                                         .session_secret = NewRandomSecret()}));
    EXPECT_TRUE(s.ok()) << s;
    auto ready = NextOfKind(*client, v1::ServerMessage::kRoundReady);
    EXPECT_TRUE(ready.ok()) << ready.status();
    return client;
  }

  std::string Get(const std::string& path, const std::string& token = "") {
    return HttpGet(port_, path, token.empty() ? "" : Bearer(token));
  }

  std::unique_ptr<RendezvousServer> server_;
  int port_ = 0;
  std::unique_ptr<RendezvousClient> a_, b_;
};

TEST_F(ConsoleApiTest, AdminSeesEveryJobAsMusterStatusJsonDoes) {
  const std::string r = Get("/api/v1/jobs", testing::kAdminToken);
  ASSERT_EQ(HttpStatusCode(r), 200) << r;
  EXPECT_THAT(r, HasSubstr("Content-Type: application/json"));
  const nlohmann::json j = nlohmann::json::parse(HttpBody(r));
  ASSERT_EQ(j["jobs"].size(), 2u) << j.dump(2);
  EXPECT_EQ(j["jobs"][0]["job_id"], "jobA");
  EXPECT_EQ(j["jobs"][0]["state"], "RUNNING");
  EXPECT_EQ(j["jobs"][1]["job_id"], "jobB");
  EXPECT_EQ(j["total_jobs"], "2");  // int64 in proto JSON is a string
  // Host names are worker-side text: served as JSON strings, never markup
  // (the page renders them as text).
  EXPECT_EQ(j["jobs"][0]["members"][0]["hostname"], "<b>host</b>");

  const std::string one = Get("/api/v1/jobs/jobB", testing::kAdminToken);
  ASSERT_EQ(HttpStatusCode(one), 200) << one;
  EXPECT_EQ(nlohmann::json::parse(HttpBody(one))["job_id"], "jobB");
  // The listing leaves out each job's Store use (one job's answer has it).
  EXPECT_FALSE(j["jobs"][0].contains("store")) << j.dump(2);
}

// A job's answer carries its round's Store use against musterd's limits.
TEST_F(ConsoleApiTest, AJobShowsItsStoreUseAgainstTheLimits) {
  ASSERT_TRUE(server_->store().Set("jobA/1", "rank0/addr", "10.0.0.1").ok());
  ASSERT_TRUE(server_->store().Set("jobA/1", "barrier", "2").ok());
  const std::string r = Get("/api/v1/jobs/jobA", testing::kAdminToken);
  ASSERT_EQ(HttpStatusCode(r), 200) << r;
  const nlohmann::json store = nlohmann::json::parse(HttpBody(r))["store"];
  ASSERT_TRUE(store.is_object()) << HttpBody(r);
  EXPECT_EQ(store["prefix"], "jobA/1");
  EXPECT_EQ(store["keys"], "2");
  // Keys and values: 10 + 8 + 7 + 1 bytes.
  EXPECT_EQ(store["bytes"], "26");
  EXPECT_EQ(store["max_keys"], std::to_string(int64_t{1} << 20));
  EXPECT_EQ(store["max_bytes"], std::to_string(int64_t{256} << 20));
}

TEST_F(ConsoleApiTest, AJobTokenSeesItsJobOnly) {
  const std::string r = Get("/api/v1/jobs", testing::kJobToken);
  ASSERT_EQ(HttpStatusCode(r), 200) << r;
  const nlohmann::json j = nlohmann::json::parse(HttpBody(r));
  ASSERT_EQ(j["jobs"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["jobs"][0]["job_id"], "jobA");
  EXPECT_EQ(j["total_jobs"], "1");
  EXPECT_EQ(HttpStatusCode(Get("/api/v1/jobs/jobA", testing::kJobToken)), 200);
  const std::string other = Get("/api/v1/jobs/jobB", testing::kJobToken);
  EXPECT_EQ(HttpStatusCode(other), 403) << other;
  EXPECT_THAT(other, Not(HasSubstr(kOtherToken)));
  EXPECT_THAT(other, Not(HasSubstr(testing::kJobToken)));
}

TEST_F(ConsoleApiTest, NoTokenIs401AndAWrongOneShowsNothing) {
  for (const char* path : {"/api/v1/jobs", "/api/v1/jobs/jobA"}) {
    const std::string r = Get(path);
    EXPECT_EQ(HttpStatusCode(r), 401) << path << "\n" << r;
    EXPECT_THAT(r, HasSubstr("WWW-Authenticate: Bearer"));
    EXPECT_THAT(r, Not(HasSubstr("RUNNING")));
  }
  const std::string wrong = Get("/api/v1/jobs", testing::kWrongToken);
  ASSERT_EQ(HttpStatusCode(wrong), 200) << wrong;
  EXPECT_EQ(nlohmann::json::parse(HttpBody(wrong))["jobs"].size(), 0u);
  EXPECT_EQ(HttpStatusCode(Get("/api/v1/jobs/jobA", testing::kWrongToken)),
            403);
  const std::string malformed =
      HttpGet(port_, "/api/v1/jobs", "Authorization: Basic abc\r\n");
  EXPECT_EQ(HttpStatusCode(malformed), 401) << malformed;
  EXPECT_THAT(malformed, HasSubstr("Bearer TOKEN"));
}

TEST_F(ConsoleApiTest, FiltersPagesAndNamesBadParameters) {
  auto jobs = [&](const std::string& query) {
    const std::string r = Get("/api/v1/jobs" + query, testing::kAdminToken);
    EXPECT_EQ(HttpStatusCode(r), 200) << r;
    return nlohmann::json::parse(HttpBody(r));
  };
  EXPECT_EQ(jobs("?q=B")["jobs"].size(), 1u);
  EXPECT_EQ(jobs("?state=RUNNING")["jobs"].size(), 2u);
  EXPECT_EQ(jobs("?state=FAILED")["jobs"].size(), 0u);
  const nlohmann::json first = jobs("?page_size=1");
  ASSERT_EQ(first["jobs"].size(), 1u);
  const std::string token = first["next_page_token"];
  ASSERT_FALSE(token.empty());
  const nlohmann::json second = jobs("?page_size=1&page_token=" + token);
  ASSERT_EQ(second["jobs"].size(), 1u);
  EXPECT_EQ(second["jobs"][0]["job_id"], "jobB");

  for (const char* bad : {"?page_size=ten", "?page_size=20000",
                          "?state=DANCING", "?page_token=forged"}) {
    const std::string r =
        Get(std::string("/api/v1/jobs") + bad, testing::kAdminToken);
    EXPECT_EQ(HttpStatusCode(r), 400) << bad << "\n" << r;
    EXPECT_THAT(nlohmann::json::parse(HttpBody(r))["error"]["message"]
                    .get<std::string>(),
                Not(HasSubstr("internal")))
        << bad;
  }
  const std::string none = Get("/api/v1/jobs/nope", testing::kAdminToken);
  EXPECT_EQ(HttpStatusCode(none), 404) << none;
  EXPECT_THAT(none, HasSubstr("knows no job 'nope'"));
  EXPECT_EQ(HttpStatusCode(Get("/api/v1/elsewhere", testing::kAdminToken)),
            404);
}

// The cluster's totals: what the caller may see of the jobs, the server's
// activity counters (the page makes rates of them), and whether it leads.
TEST_F(ConsoleApiTest, ClusterCountsWhatTheCallerMaySee) {
  const std::string r = Get("/api/v1/cluster", testing::kAdminToken);
  ASSERT_EQ(HttpStatusCode(r), 200) << r;
  const nlohmann::json admin = nlohmann::json::parse(HttpBody(r));
  EXPECT_EQ(admin["jobs"], 2);
  EXPECT_EQ(admin["agents_connected"], 2);
  EXPECT_GE(admin["joins_total"].get<int64_t>(), 2);
  EXPECT_GE(admin["rounds_total"].get<int64_t>(), 2);
  EXPECT_EQ(admin["serving"], true);
  EXPECT_EQ(admin["replica_status"], "");
  const nlohmann::json job = nlohmann::json::parse(
      HttpBody(Get("/api/v1/cluster", testing::kJobToken)));
  EXPECT_EQ(job["jobs"], 1);
  EXPECT_EQ(HttpStatusCode(Get("/api/v1/cluster")), 401);
}

// --metrics-admin-only: /metrics names every job, so it can be kept for the
// admin token; a job's token or none gets 401. Without the admin token to
// check against, the server refuses to start.
TEST(ConsoleMetricsTest, MetricsAdminOnlyWantsTheAdminToken) {
  ServerOptions options;
  options.http_listen = "127.0.0.1:0";
  options.admin_token = testing::kAdminToken;
  options.metrics_admin_only = true;
  auto server = testing::StartLoopbackServer(options);
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string admin =
      HttpGet(port, "/metrics", Bearer(testing::kAdminToken));
  EXPECT_EQ(HttpStatusCode(admin), 200) << admin;
  EXPECT_THAT(admin, HasSubstr("muster_jobs"));
  for (const std::string& headers :
       {std::string(), Bearer(testing::kJobToken),
        std::string("Authorization: Basic x\r\n")}) {
    const std::string r = HttpGet(port, "/metrics", headers);
    EXPECT_EQ(HttpStatusCode(r), 401) << headers << r;
    EXPECT_THAT(r, Not(HasSubstr("muster_jobs")));
  }
  EXPECT_EQ(HttpStatusCode(HttpGet(port, "/healthz")), 200);
  server->Shutdown();

  options.admin_token = "";
  auto refused = RendezvousServer::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--admin-token-file"));
}

}  // namespace
}  // namespace muster::rendezvous
