// GetStatus paging in the core (issue 11): the Coordinator's StatusPage on
// fake channels, and the request parsing of status_page.h. Order by job id,
// opaque tokens that survive jobs coming and going, the total counted after
// the caller's filter, and the byte bound of a page.
#include "rendezvous/src/core/status_page.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "tests/testing/join.h"

namespace muster::rendezvous {
namespace {

using ::testing::HasSubstr;

class DropChannel : public AgentChannel {
 public:
  void Send(const v1::ServerMessage&) override {}
  void Close(const absl::Status&) override {}
};

class StatusPageTest : public ::testing::Test {
 protected:
  StatusPageTest() : coord_(Options(), &clock_) {}

  static CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_heartbeat_timeout = absl::Hours(10);
    o.default_join_timeout = absl::Hours(10);
    return o;
  }

  // One agent joins `job` (which waits for `min_nodes`, so it stays OPEN and
  // listed) as node `node`.
  void Join(const std::string& job, const std::string& node, int min_nodes = 2,
            const std::string& hostname = "h") {
    v1::Join j = testing::MakeJoin({.job_id = job,
                                    .node_id = node,
                                    .hostname = hostname,
                                    .advertised_addr = "127.0.0.1",
                                    .min_nodes = min_nodes,
                                    .max_nodes = std::max(min_nodes, 1 << 20)});
    ASSERT_TRUE(coord_.OnJoin(++conn_, j, std::make_shared<DropChannel>()).ok())
        << job << " " << node;
  }

  // Every page of a listing with `query` (after/visible/size), in order.
  std::vector<v1::GetStatusResponse> AllPages(StatusPageQuery query) {
    std::vector<v1::GetStatusResponse> pages;
    for (int i = 0; i < 10000; ++i) {
      pages.push_back(coord_.StatusPage(query));
      const std::string& token = pages.back().next_page_token();
      if (token.empty()) break;
      v1::GetStatusRequest next;
      next.set_page_size(query.page_size);
      next.set_page_token(token);
      absl::StatusOr<StatusPageQuery> parsed = StatusPageQueryOf(next);
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      if (!parsed.ok()) break;
      query.after = parsed->after;
    }
    return pages;
  }

  static std::vector<std::string> Ids(
      const std::vector<v1::GetStatusResponse>& pages) {
    std::vector<std::string> ids;
    for (const auto& p : pages)
      for (const auto& j : p.jobs()) ids.push_back(j.job_id());
    return ids;
  }

  FakeClock clock_;
  Coordinator coord_;
  ConnectionId conn_ = 0;
};

TEST_F(StatusPageTest, PagesListEveryJobOnceInIdOrderWithTheTotal) {
  std::vector<std::string> want;
  for (int i = 0; i < 25; ++i) {
    // Joined out of order: the listing is by id, not by age.
    const std::string id = absl::StrFormat("job-%02d", (i * 7) % 25);
    Join(id, "a");
    want.push_back(id);
  }
  std::sort(want.begin(), want.end());
  StatusPageQuery query;
  query.page_size = 10;
  std::vector<v1::GetStatusResponse> pages = AllPages(query);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pages[0].jobs_size(), 10);
  EXPECT_EQ(pages[2].jobs_size(), 5);
  for (const auto& p : pages) EXPECT_EQ(p.total_jobs(), 25);
  EXPECT_EQ(Ids(pages), want);
  EXPECT_TRUE(pages[2].next_page_token().empty());
  // A page that ends exactly at the last job has no token either.
  query.page_size = 25;
  EXPECT_TRUE(coord_.StatusPage(query).next_page_token().empty());
}

TEST_F(StatusPageTest, TokenIsStableWhenJobsComeAndGoBetweenPages) {
  for (int i = 0; i < 6; ++i) Join(absl::StrCat("j", i), "a");
  StatusPageQuery query;
  query.page_size = 3;
  v1::GetStatusResponse first = coord_.StatusPage(query);
  ASSERT_EQ(first.jobs(2).job_id(), "j2");
  // The token is opaque: it does not show the id in clear.
  EXPECT_THAT(first.next_page_token(), ::testing::Not(HasSubstr("j2")));
  // j0 ends (its only agent leaves: an OPEN job without agents is dropped) and
  // j10 (sorting before j2) and j9 (after) appear.
  coord_.OnDisconnect(1);
  Join("j10", "a");
  Join("j9", "a");
  v1::GetStatusRequest next;
  next.set_page_size(3);
  next.set_page_token(first.next_page_token());
  absl::StatusOr<StatusPageQuery> parsed = StatusPageQueryOf(next);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  v1::GetStatusResponse second = coord_.StatusPage(*parsed);
  // The page goes on after j2: nothing listed twice, nothing behind the
  // cursor skipped that was there before.
  std::vector<std::string> ids;
  for (const auto& j : second.jobs()) ids.push_back(j.job_id());
  EXPECT_THAT(ids, ::testing::ElementsAre("j3", "j4", "j5"));
  EXPECT_EQ(second.total_jobs(), 7);  // j1..j5, j10, j9
}

TEST_F(StatusPageTest, TotalCountsOnlyTheJobsTheCallerMaySee) {
  for (int i = 0; i < 30; ++i) Join(absl::StrFormat("job%02d", i), "a");
  StatusPageQuery query;
  query.page_size = 4;
  // A caller that may see the even jobs only.
  query.visible = [](absl::string_view id) {
    return (id.back() - '0') % 2 == 0;
  };
  std::vector<v1::GetStatusResponse> pages = AllPages(query);
  ASSERT_EQ(pages.size(), 4u);  // 15 jobs by 4
  for (const auto& p : pages) EXPECT_EQ(p.total_jobs(), 15);
  for (const std::string& id : Ids(pages)) {
    EXPECT_EQ((id.back() - '0') % 2, 0) << id;
  }
  EXPECT_EQ(Ids(pages).size(), 15u);
  // A caller that may see none learns no count, and gets no token.
  query.visible = [](absl::string_view) { return false; };
  v1::GetStatusResponse none = coord_.StatusPage(query);
  EXPECT_EQ(none.total_jobs(), 0);
  EXPECT_EQ(none.jobs_size(), 0);
  EXPECT_TRUE(none.next_page_token().empty());
}

TEST_F(StatusPageTest, PageStaysUnderItsByteBound) {
  // 30 jobs of 100 waiting nodes with long host names: about 25 KB each.
  const std::string host(200, 'h');
  for (int i = 0; i < 30; ++i) {
    for (int n = 0; n < 100; ++n) {
      Join(absl::StrFormat("big%02d", i), absl::StrCat("node-", n), 1000, host);
    }
  }
  StatusPageQuery query;
  query.page_size = kMaxStatusPageSize;
  query.max_bytes = 100 * 1024;
  std::vector<v1::GetStatusResponse> pages = AllPages(query);
  EXPECT_GT(pages.size(), 5u);
  for (const auto& p : pages) {
    EXPECT_LE(p.ByteSizeLong(), 100u * 1024 + 1024);
    EXPECT_GT(p.jobs_size(), 0);
    for (const auto& j : p.jobs()) {
      EXPECT_EQ(j.waiting_size(), 100);
      EXPECT_EQ(j.waiting_omitted(), 0);
    }
  }
  EXPECT_EQ(Ids(pages).size(), 30u);
  // The server's own bound, with the default page: 30 x 25 KB fit in 1 MiB.
  EXPECT_EQ(coord_.StatusPage(StatusPageQuery()).jobs_size(), 30);
}

TEST_F(StatusPageTest, JobLargerThanAPageKeepsItsFirstNodesAndCountsTheRest) {
  const std::string host(200, 'h');
  for (int n = 0; n < 3000; ++n) {  // ~700 KB of waiting nodes
    Join("huge", absl::StrFormat("node-%04d", n), 100000, host);
  }
  Join("small", "a");
  StatusPageQuery query;
  query.max_bytes = 256 * 1024;
  v1::GetStatusResponse page = coord_.StatusPage(query);
  ASSERT_EQ(page.jobs_size(), 1);
  const v1::JobStatus& job = page.jobs(0);
  EXPECT_EQ(job.job_id(), "huge");
  EXPECT_LE(page.ByteSizeLong(), 256u * 1024 + 1024);
  EXPECT_GT(job.waiting_size(), 100);
  EXPECT_EQ(job.waiting_size() + job.waiting_omitted(), 3000);
  EXPECT_EQ(job.waiting(0).node_id(), "node-0000");  // the first ones are kept
  EXPECT_EQ(page.total_jobs(), 2);
  EXPECT_FALSE(page.next_page_token().empty());  // "small" follows
}

TEST(StatusPageQueryTest, BadPageSizeAndTokenAreRefusedNamingTheFix) {
  v1::GetStatusRequest r;
  absl::StatusOr<StatusPageQuery> q = StatusPageQueryOf(r);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->page_size, kDefaultStatusPageSize);
  EXPECT_EQ(q->max_bytes, kStatusPageBytes);
  EXPECT_TRUE(q->after.empty());
  for (int bad : {-1, kMaxStatusPageSize + 1, 2147483647}) {
    r.set_page_size(bad);
    q = StatusPageQueryOf(r);
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(q.status().message(), HasSubstr("page_size")) << bad;
    EXPECT_THAT(q.status().message(), HasSubstr("1 to 10000")) << bad;
  }
  r.set_page_size(kMaxStatusPageSize);
  EXPECT_TRUE(StatusPageQueryOf(r).ok());
  for (const std::string& bad :
       {std::string("job-1"), std::string("p1.!!!"), std::string("p2.ajE"),
        std::string("p1."), StatusPageTokenAfter("a/b"),
        std::string(1 << 20, 'x')}) {
    r.set_page_token(bad);
    q = StatusPageQueryOf(r);
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(q.status().message(), HasSubstr("page_token"));
    EXPECT_THAT(q.status().message(), HasSubstr("next_page_token"));
    EXPECT_LT(q.status().message().size(), 400u);
  }
  r.set_page_token(StatusPageTokenAfter("job-7"));
  q = StatusPageQueryOf(r);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->after, "job-7");
}

}  // namespace
}  // namespace muster::rendezvous
