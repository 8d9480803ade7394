// GetStatus paging over gRPC (issue 11): a real RendezvousServer on loopback
// holding 20,000 live jobs, listed in full by the real `muster status`
// binary; a client without paging fields gets a bounded first page and the
// total; the total counts only the jobs a caller's token may see.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/logging.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::LoopbackChannel;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::NextOfKind;
using ::muster::testing::PrepareContext;
using ::muster::testing::StartLoopbackServer;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kJobs = 20000;

class DropChannel : public AgentChannel {
 public:
  void Send(const v1::ServerMessage&) override {}
  void Close(const absl::Status&) override {}
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

// 20,000 live jobs, made through the Coordinator's own API on the server's
// Coordinator (one waiting agent each, on a channel that drops messages):
// the cheap way to hold that many jobs; the listing itself is all gRPC.
class ManyJobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerOptions options;
    options.coordinator.event_log_level = LogLevel::kDebug;  // 20,000 "new"s
    server_ = StartLoopbackServer(options).release();
    ASSERT_NE(server_, nullptr);
    const absl::Time start = absl::Now();
    // Two waiting agents a job, with host names and node ids as long as a
    // real cluster's: about 6 MB of status in all, more than gRPC's 4 MiB.
    ConnectionId conn = ConnectionId{1} << 40;  // far above the server's own
    for (int i = 0; i < kJobs; ++i) {
      for (const char* node : {"a", "b"}) {
        const std::string host = absl::StrCat("host-", node, i % 100,
                                              ".rack-17.dc-west.example.com");
        v1::Join join = muster::testing::MakeJoin(
            {.job_id = absl::StrFormat("job-%05d", i),
             .node_id = absl::StrCat(host, "-4242-", node),
             .hostname = host,
             .advertised_addr = "10.0.0.1",
             .min_nodes = 3,
             .max_nodes = 4,
             .heartbeat_timeout_ms = 3'600'000});
        absl::Status s = server_->coordinator().OnJoin(
            ++conn, join, std::make_shared<DropChannel>());
        ASSERT_TRUE(s.ok()) << s;
      }
    }
    std::fprintf(stderr, "%d jobs joined in %s\n", kJobs,
                 absl::FormatDuration(absl::Now() - start).c_str());
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Shutdown();
    delete server_;
    server_ = nullptr;
  }

  static std::string Endpoint() { return LoopbackEndpoint(server_->port()); }

  static RendezvousServer* server_;
};

RendezvousServer* ManyJobsTest::server_ = nullptr;

TEST_F(ManyJobsTest, OneResponseWouldExceedGrpcsLimit) {
  // What GetStatus returned before it was paged (and what made `muster
  // status` fail with 14,000 jobs).
  EXPECT_GT(server_->coordinator().Status("").ByteSizeLong(), size_t{4} << 20);
}

TEST_F(ManyJobsTest, MusterStatusListsEveryJobWithTheTotal) {
  const absl::Time start = absl::Now();
  Subprocess status({BinPath("muster"), "status",
                     "--rdzv-endpoint=" + Endpoint(), "--timeout=60"});
  ASSERT_EQ(status.WaitOrKill(absl::Seconds(120)), 0)
      << status.Output().substr(0, 2000);
  std::fprintf(stderr, "muster status of %d jobs took %s\n", kJobs,
               absl::FormatDuration(absl::Now() - start).c_str());
  const std::string out = status.Output();
  EXPECT_THAT(out.substr(0, 200), HasSubstr(": 20000 jobs\n"));
  EXPECT_EQ(Count(out, "\njob job-"), static_cast<size_t>(kJobs));
  EXPECT_THAT(out, HasSubstr("\njob job-00000: OPEN, round "));
  EXPECT_EQ(Count(out, "-4242-b\n"), static_cast<size_t>(kJobs));
  EXPECT_THAT(out, HasSubstr("\njob job-19999: OPEN"));
  EXPECT_THAT(out, Not(HasSubstr("more:")));  // nothing left out
}

TEST_F(ManyJobsTest, MusterStatusJsonHasEveryJobAndTheTotal) {
  Subprocess status({BinPath("muster"), "status", "--json", "--page-size=7000",
                     "--rdzv-endpoint=" + Endpoint(), "--timeout=60"});
  ASSERT_EQ(status.WaitOrKill(absl::Seconds(120)), 0)
      << status.Output().substr(0, 2000);
  const std::string out = status.Output();
  EXPECT_EQ(Count(out, "\"job_id\": \"job-"), static_cast<size_t>(kJobs));
  EXPECT_THAT(out, HasSubstr("\"total_jobs\": \"20000\""));
  EXPECT_THAT(out, HasSubstr("\"next_page_token\": \"\""));
}

TEST_F(ManyJobsTest, ClientWithoutPagingGetsABoundedFirstPageAndTheTotal) {
  auto stub = v1::Rendezvous::NewStub(LoopbackChannel(server_->port()));
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::GetStatusResponse page;
  ASSERT_TRUE(stub->GetStatus(&context, v1::GetStatusRequest(), &page).ok());
  EXPECT_EQ(page.jobs_size(), 1000);
  EXPECT_EQ(page.total_jobs(), kJobs);
  EXPECT_EQ(page.jobs(0).job_id(), "job-00000");
  EXPECT_EQ(page.jobs(999).job_id(), "job-00999");
  EXPECT_FALSE(page.next_page_token().empty());
  EXPECT_LT(page.ByteSizeLong(), size_t{1} << 21);  // far from gRPC's 4 MiB

  // The largest page allowed still stays under the byte bound.
  grpc::ClientContext big_context;
  PrepareContext(&big_context);
  v1::GetStatusRequest big;
  big.set_page_size(10000);
  ASSERT_TRUE(stub->GetStatus(&big_context, big, &page).ok());
  EXPECT_LE(page.ByteSizeLong(), (size_t{1} << 20) + 1024);
  EXPECT_EQ(page.total_jobs(), kJobs);
}

TEST_F(ManyJobsTest, BadPageSizeAndTokenAreInvalidArgument) {
  Subprocess status({BinPath("muster"), "status", "--page-size=20000",
                     "--rdzv-endpoint=" + Endpoint()});
  EXPECT_EQ(status.WaitOrKill(absl::Seconds(30)), 2) << status.Output();
  EXPECT_THAT(status.Output(), HasSubstr("page_size 20000"));
  EXPECT_THAT(status.Output(), HasSubstr("1 to 10000"));

  auto stub = v1::Rendezvous::NewStub(LoopbackChannel(server_->port()));
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::GetStatusRequest request;
  request.set_page_token("job-00010");
  v1::GetStatusResponse page;
  grpc::Status s = stub->GetStatus(&context, request, &page);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("next_page_token"));
}

// Tokens: each caller's total counts only what it may see (issue 12's
// filter, applied before paging).
TEST(StatusAuthTest, TotalCountsOnlyTheJobsOfTheCallersToken) {
  constexpr char kTokenA[] = "token-of-team-a-0123456789abcdef";
  constexpr char kTokenB[] = "token-of-team-b-0123456789abcdef";
  constexpr char kAdmin[] = "admin-token-for-tests-0123456789";
  ServerOptions options;
  options.admin_token = kAdmin;
  auto server = StartLoopbackServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<RendezvousClient>> agents;
  auto join = [&](const std::string& job, const std::string& token) {
    GrpcClientOptions o;
    o.endpoint = LoopbackEndpoint(server->port());
    o.security.token = token;
    agents.push_back(NewGrpcRendezvousClient(o));
    absl::Status s = agents.back()->Start(muster::testing::MakeJoin(
        {.job_id = job, .node_id = "a", .min_nodes = 2, .max_nodes = 2}));
    ASSERT_TRUE(s.ok()) << job << ": " << s;
    ASSERT_TRUE(NextOfKind(*agents.back(), v1::ServerMessage::kWaiting).ok())
        << job;
  };
  for (const char* job : {"a-1", "a-2", "a-3"}) join(job, kTokenA);
  for (const char* job : {"b-1", "b-2"}) join(job, kTokenB);
  join("open-1", "");

  auto stub = v1::Rendezvous::NewStub(LoopbackChannel(server->port()));
  // Page by page with 2 jobs a page: the jobs listed and the total of each.
  auto list = [&](const std::string& token, std::vector<std::string>* ids,
                  std::vector<int64_t>* totals) {
    v1::GetStatusRequest request;
    request.set_page_size(2);
    for (int i = 0; i < 10; ++i) {
      grpc::ClientContext context;
      PrepareContext(&context, token);
      v1::GetStatusResponse page;
      grpc::Status s = stub->GetStatus(&context, request, &page);
      ASSERT_TRUE(s.ok()) << s.error_message();
      for (const auto& j : page.jobs()) ids->push_back(j.job_id());
      totals->push_back(page.total_jobs());
      if (page.next_page_token().empty()) return;
      request.set_page_token(page.next_page_token());
    }
    FAIL() << "more than 10 pages";
  };
  using ::testing::Each;
  using ::testing::ElementsAre;
  std::vector<std::string> ids;
  std::vector<int64_t> totals;
  list(kTokenA, &ids, &totals);
  EXPECT_THAT(ids, ElementsAre("a-1", "a-2", "a-3", "open-1"));
  EXPECT_THAT(totals, ElementsAre(4, 4));
  ids.clear();
  totals.clear();
  list("", &ids, &totals);
  EXPECT_THAT(ids, ElementsAre("open-1"));
  EXPECT_THAT(totals, ElementsAre(1));
  ids.clear();
  totals.clear();
  list(kAdmin, &ids, &totals);
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_THAT(totals, Each(6));

  // The client library follows the pages with the caller's token too.
  store::ClientSecurity b;
  b.token = kTokenB;
  auto all = QueryStatus(LoopbackEndpoint(server->port()), "",
                         absl::Seconds(10), b, /*page_size=*/1);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->total_jobs(), 3);
  ASSERT_EQ(all->jobs_size(), 3);
  EXPECT_EQ(all->jobs(2).job_id(), "open-1");
  EXPECT_TRUE(all->next_page_token().empty());
}

}  // namespace
}  // namespace muster::rendezvous
