// In-place recovery without an agent: the test plays the agent, writing each
// worker's control files (`round`) itself, with ranks as threads on real Gloo
// over loopback and a real Store (a RendezvousServer on loopback, one
// namespace per round). A rank is "lost" as a crashed process would be
// (CrashForTesting: every connection closed without a goodbye); the survivors'
// collective fails ABORTED naming it, later calls fail naming the ended
// round, and Recover joins the next round the test announces. Also: a
// newcomer grows the world, a Recover that no round answers, groups of an
// ended round, the hello file, the round file's parser, and the C API.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/api/init.h"
#include "comm/src/control_channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/comm/c_api.h"
#include "muster/comm/communicator.h"
#include "muster/platform/files.h"
#include "muster/rendezvous/server.h"
#include "muster/store/grpc_store.h"
#include "muster/store/in_memory_store.h"
#include "tests/comm/fake_agent.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"

namespace muster::comm {
namespace {

using comm_testing::FakeAgent;
using ::testing::HasSubstr;
using ::testing::Not;

// Runs the functions on threads of their own and joins them.
void Parallel(const std::vector<std::function<void()>>& fns) {
  std::vector<std::thread> threads;
  for (const auto& fn : fns) threads.emplace_back(fn);
  for (std::thread& t : threads) t.join();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every rank contributes rank + 1; the sum is n (n + 1) / 2.
void ExpectSum(std::vector<std::unique_ptr<Communicator>*> comms) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::function<void()>> fns;
  for (auto* c : comms) {
    fns.push_back([c, n] {
      std::vector<float> v(1000, static_cast<float>((*c)->rank() + 1));
      absl::Status s = (*c)->AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(v[0], n * (n + 1) / 2.0f);
      EXPECT_EQ(v[999], n * (n + 1) / 2.0f);
    });
  }
  Parallel(fns);
}

// Shared memory between the ranks (one host), or the TCP path (a host each).
class RecoverTest : public ::testing::TestWithParam<bool> {
 protected:
  std::string Host(int w) {
    return GetParam() ? "one-host" : absl::StrCat("host-", w);
  }
};

TEST_P(RecoverTest, SurvivorsOfALostRankRecoverAndAllReduce) {
  FakeAgent agent;
  ASSERT_TRUE(agent.ok());
  for (int w = 0; w < 3; ++w) agent.Write(w, true, 1, w, 3);
  std::shared_ptr<store::Store> store = agent.Store("round1");
  std::vector<std::unique_ptr<Communicator>> comms(3);
  Parallel(
      {[&] {
         auto c = Communicator::Create(store, 0, 3, agent.Options(0, Host(0)));
         ASSERT_TRUE(c.ok()) << c.status();
         comms[0] = std::move(*c);
       },
       [&] {
         auto c = Communicator::Create(store, 1, 3, agent.Options(1, Host(1)));
         ASSERT_TRUE(c.ok()) << c.status();
         comms[1] = std::move(*c);
       },
       [&] {
         auto c = Communicator::Create(store, 2, 3, agent.Options(2, Host(2)));
         ASSERT_TRUE(c.ok()) << c.status();
         comms[2] = std::move(*c);
       }});
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  ExpectSum({&comms[0], &comms[1], &comms[2]});
  EXPECT_FALSE(comms[0]->RoundChanged());

  // Rank 1 is lost mid-job; the survivors' collective names it.
  internal::CrashForTesting(*comms[1]);
  comms[1].reset();
  absl::Status failed[3];
  Parallel({[&] {
              std::vector<float> v(1000, 1.0f);
              failed[0] =
                  comms[0]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
            },
            [&] {
              std::vector<float> v(1000, 1.0f);
              failed[2] =
                  comms[2]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
            }});
  for (int r : {0, 2}) {
    EXPECT_TRUE(absl::IsAborted(failed[r])) << failed[r];
    EXPECT_THAT(failed[r].message(), HasSubstr("peer rank 1")) << failed[r];
    // The round ended for it: the next call says so, and moves no byte.
    EXPECT_TRUE(comms[r]->RoundChanged());
    float x = 1;
    absl::Status ended =
        comms[r]->AllReduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_TRUE(absl::IsFailedPrecondition(ended)) << ended;
    EXPECT_THAT(ended.message(), HasSubstr("round 1 ended"));
    EXPECT_THAT(ended.message(), HasSubstr("peer rank 1"));
    EXPECT_THAT(ended.message(), HasSubstr("call Recover()"));
    auto work = comms[r]->StartBarrier();
    EXPECT_TRUE(absl::IsFailedPrecondition(work.status())) << work.status();
  }

  // The agent announces the next round: the survivors, compacted.
  agent.Write(0, false, 1, 0, 3, "node b (rank 1) lost");
  agent.Write(2, false, 1, 2, 3, "node b (rank 1) lost");
  float x = 1;
  absl::Status ended =
      comms[0]->AllReduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_THAT(ended.message(),
              HasSubstr("round 1 ended (node b (rank 1) lost)"));
  EXPECT_THAT(ended.message(), Not(HasSubstr("s3cret")));
  absl::StatusOr<RecoverResult> recovered[3];
  Parallel({[&] { recovered[0] = comms[0]->Recover(absl::Seconds(30)); },
            [&] { recovered[2] = comms[2]->Recover(absl::Seconds(30)); },
            [&] {
              // Recover waits for the round: it comes a moment later.
              absl::SleepFor(absl::Milliseconds(50));
              agent.Write(0, true, 2, 0, 2);
              agent.Write(2, true, 2, 1, 2);
            }});
  ASSERT_TRUE(recovered[0].ok()) << recovered[0].status();
  ASSERT_TRUE(recovered[2].ok()) << recovered[2].status();
  EXPECT_EQ(recovered[0]->rank, 0);
  EXPECT_EQ(recovered[2]->rank, 1);
  EXPECT_EQ(recovered[2]->world_size, 2);
  EXPECT_EQ(recovered[2]->previous_rank, 2);
  EXPECT_EQ(recovered[2]->previous_world_size, 3);
  EXPECT_EQ(recovered[2]->round, 2);
  EXPECT_EQ(comms[2]->rank(), 1);
  EXPECT_EQ(comms[2]->world_size(), 2);
  EXPECT_FALSE(comms[0]->RoundChanged());
  ExpectSum({&comms[0], &comms[2]});
  ExpectSum({&comms[0], &comms[2]});
  Parallel({[&] { comms[0]->Shutdown(); }, [&] { comms[2]->Shutdown(); }});
}

TEST_P(RecoverTest, ANewcomerGrowsTheWorldAtAStepBoundary) {
  FakeAgent agent;
  ASSERT_TRUE(agent.ok());
  for (int w = 0; w < 2; ++w) agent.Write(w, true, 1, w, 2);
  std::shared_ptr<store::Store> store = agent.Store("round1");
  std::vector<std::unique_ptr<Communicator>> comms(3);
  std::unique_ptr<Communicator> group;
  std::unique_ptr<Communicator> group1;  // Rank 1's, kept as long.
  Parallel({[&] {
              auto c =
                  Communicator::Create(store, 0, 2, agent.Options(0, Host(0)));
              ASSERT_TRUE(c.ok()) << c.status();
              comms[0] = std::move(*c);
              auto g = comms[0]->NewGroup({0, 1});
              ASSERT_TRUE(g.ok()) << g.status();
              group = std::move(*g);
            },
            [&] {
              auto c =
                  Communicator::Create(store, 1, 2, agent.Options(1, Host(1)));
              ASSERT_TRUE(c.ok()) << c.status();
              comms[1] = std::move(*c);
              auto g = comms[1]->NewGroup({0, 1});
              ASSERT_TRUE(g.ok()) << g.status();
              group1 = std::move(*g);
            }});
  ASSERT_TRUE(comms[0] && comms[1] && group);
  ExpectSum({&comms[0], &comms[1]});

  // A newcomer waits: the round ends without a failure; RoundChanged says so.
  agent.Write(0, false, 1, 0, 2, "a newcomer waits");
  agent.Write(1, false, 1, 1, 2, "a newcomer waits");
  EXPECT_TRUE(comms[0]->RoundChanged());
  EXPECT_TRUE(comms[1]->RoundChanged());
  float x = 1;
  absl::Status ended = comms[1]->Broadcast(&x, 1, DataType::kFloat32, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(ended)) << ended;
  EXPECT_THAT(ended.message(), HasSubstr("round 1 ended (a newcomer waits)"));
  absl::Status group_ended = group->Barrier();
  EXPECT_TRUE(absl::IsFailedPrecondition(group_ended)) << group_ended;
  EXPECT_THAT(group_ended.message(), HasSubstr("made in round 1"));
  EXPECT_THAT(group_ended.message(), HasSubstr("NewGroup() after Recover()"));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(group->Recover(absl::Seconds(1)).status()));

  agent.Write(0, true, 2, 0, 3);
  agent.Write(1, true, 2, 1, 3);
  agent.Write(2, true, 2, 2, 3);
  std::shared_ptr<store::Store> store2 = agent.Store("round2");
  Parallel({[&] { ASSERT_TRUE(comms[0]->Recover(absl::Seconds(30)).ok()); },
            [&] { ASSERT_TRUE(comms[1]->Recover(absl::Seconds(30)).ok()); },
            [&] {
              auto c =
                  Communicator::Create(store2, 2, 3, agent.Options(2, Host(2)));
              ASSERT_TRUE(c.ok()) << c.status();
              comms[2] = std::move(*c);
            }});
  ASSERT_TRUE(comms[2]);
  EXPECT_EQ(comms[1]->world_size(), 3);
  ExpectSum({&comms[0], &comms[1], &comms[2]});
  // The old group stays ended; a new one works.
  EXPECT_TRUE(absl::IsFailedPrecondition(group->Barrier()));
  Parallel({[&] {
              auto g = comms[0]->NewGroup({0, 2});
              ASSERT_TRUE(g.ok()) << g.status();
              EXPECT_TRUE((*g)->Barrier().ok());
            },
            [&] {
              auto g = comms[2]->NewGroup({0, 2});
              ASSERT_TRUE(g.ok()) << g.status();
              EXPECT_TRUE((*g)->Barrier().ok());
            }});
  Parallel({[&] { comms[0]->Shutdown(); }, [&] { comms[1]->Shutdown(); },
            [&] { comms[2]->Shutdown(); }});
}

INSTANTIATE_TEST_SUITE_P(Transports, RecoverTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SharedMemory" : "AcrossHosts";
                         });

TEST(RecoverErrorsTest, RecoverWithoutANewRoundIsDeadlineExceeded) {
  FakeAgent agent;
  ASSERT_TRUE(agent.ok());
  agent.Write(0, true, 4, 0, 1);
  auto comm =
      Communicator::Create(agent.Store("round4"), 0, 1, agent.Options(0, "h"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  agent.Write(0, false, 4, 0, 1, "node c lost");
  const absl::Time start = absl::Now();
  absl::StatusOr<RecoverResult> r = (*comm)->Recover(absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(r.status().message(), HasSubstr(agent.Dir(0)));
  EXPECT_THAT(r.status().message(), HasSubstr("no round after round 4"));
  EXPECT_THAT(r.status().message(), HasSubstr("changing round 4"));
  EXPECT_THAT(r.status().message(), HasSubstr("the agent is gone"));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("s3cret")));
  // Still ended, and Recover may be called again.
  EXPECT_TRUE(absl::IsFailedPrecondition((*comm)->Barrier()));
  agent.Write(0, true, 5, 0, 1);
  r = (*comm)->Recover(absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->round, 5);
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST(RecoverErrorsTest, WithoutTheChannelNothingChangesAndRecoverRefuses) {
  auto comm =
      Communicator::Create(std::make_shared<store::InMemoryStore>(), 0, 1);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_FALSE((*comm)->RoundChanged());
  absl::StatusOr<RecoverResult> r = (*comm)->Recover(absl::Seconds(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("--recovery=in-place"));
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST(ControlChannelTest, HelloIsWrittenOnceWithThisProcess) {
  FakeAgent agent;
  ASSERT_TRUE(agent.ok());
  agent.Write(0, true, 1, 0, 1);
  auto comm =
      Communicator::Create(agent.Store("round1"), 0, 1, agent.Options(0, "h"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  const std::string hello = ReadAll(agent.Dir(0) + "/hello");
  EXPECT_THAT(hello, HasSubstr(absl::StrCat("\"pid\":", getpid())));
  EXPECT_THAT(hello, HasSubstr("\"library\":\"libmuster_comm\""));
  EXPECT_THAT(hello, HasSubstr("\"version\":1"));
  EXPECT_EQ(
      std::filesystem::status(agent.Dir(0) + "/hello").permissions() &
          std::filesystem::perms::all,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  CommOptions bad;
  bad.control_dir = "/nonexistent/control";
  auto refused =
      Communicator::Create(std::make_shared<store::InMemoryStore>(), 0, 1, bad);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status()));
  EXPECT_THAT(refused.status().message(), HasSubstr("/nonexistent/control"));
}

TEST(RecoverCApiTest, RoundChangedAndRecoverFromC) {
  FakeAgent agent;
  ASSERT_TRUE(agent.ok());
  agent.Write(0, true, 1, 0, 1);
  ASSERT_EQ(setenv("MUSTER_CONTROL_DIR", agent.Dir(0).c_str(), 1), 0);
  const std::string init =
      absl::StrCat("tcp://127.0.0.1:", testing::FreePort());
  muster_comm_t* comm = nullptr;
  muster_status_t s = muster_comm_init(init.c_str(), 0, 1, nullptr, &comm);
  unsetenv("MUSTER_CONTROL_DIR");
  ASSERT_EQ(s, MUSTER_OK) << muster_last_error();
  EXPECT_EQ(muster_comm_round_changed(comm), 0);
  agent.Write(0, false, 1, 0, 1, "node d lost");
  EXPECT_EQ(muster_comm_round_changed(comm), 1);
  float x = 1;
  EXPECT_EQ(muster_allreduce(comm, &x, &x, 1, MUSTER_FLOAT32, MUSTER_SUM),
            MUSTER_FAILED_PRECONDITION);
  EXPECT_THAT(muster_last_error(), HasSubstr("round 1 ended (node d lost)"));
  muster_recover_result_t result;
  EXPECT_EQ(muster_comm_recover(comm, 100, &result), MUSTER_DEADLINE_EXCEEDED);
  agent.Write(0, true, 2, 0, 1);
  ASSERT_EQ(muster_comm_recover(comm, 10000, &result), MUSTER_OK)
      << muster_last_error();
  EXPECT_EQ(result.rank, 0);
  EXPECT_EQ(result.world_size, 1);
  EXPECT_EQ(result.round, 2);
  EXPECT_EQ(muster_allreduce(comm, &x, &x, 1, MUSTER_FLOAT32, MUSTER_SUM),
            MUSTER_OK);
  EXPECT_EQ(muster_comm_round_changed(nullptr), 0);
  EXPECT_EQ(muster_comm_recover(nullptr, 1, nullptr), MUSTER_INVALID_ARGUMENT);
  muster_comm_free(comm);
}

}  // namespace
}  // namespace muster::comm
