// The shared-memory transport (comm/shm/): allreduce through the segment on
// every dtype and op against the reference, the hierarchical allreduce of
// ranks posing as several hosts (CommOptions::host_id), and the failure
// paths: a peer that stops (timeout, no hang), a peer that crashes (named),
// and a peer process that dies with no peer monitor to tell (named by the
// segment's own liveness check). Ranks are threads on one InMemoryStore,
// except in the liveness test (a forked process on a file store).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/api/init.h"
#include "comm/shm/shm_backend.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/comm/communicator.h"
#include "muster/store/file_store.h"
#include "muster/store/in_memory_store.h"
#include "tests/comm/collective_checks.h"

namespace muster::comm {
namespace {

using ::testing::HasSubstr;

CommOptions ShmOptions() {
  CommOptions options;
  options.timeout = absl::Seconds(60);
  options.allreduce_algorithm = AllReduceAlgorithm::kShm;
  return options;
}

// Runs body(comm) on one thread per entry of `hosts` (rank r on hosts[r]).
void RunRanks(const std::vector<std::string>& hosts,
              const std::function<void(Communicator&)>& body,
              CommOptions options = ShmOptions()) {
  auto store = std::make_shared<store::InMemoryStore>();
  const int n = static_cast<int>(hosts.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommOptions mine = options;
      mine.host_id = hosts[r];
      auto comm = Communicator::Create(store, r, n, mine);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status();
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

std::vector<std::string> OneHost(int n) {
  return std::vector<std::string>(n, "host-a");
}

class ShmTest : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) {
                           return absl::StrCat("N", info.param);
                         });

// 1 and 1001 elements (the one-barrier path), 300 KB (two chunks) and 3 MB
// (a dozen), every dtype and op, in and out of place.
TEST_P(ShmTest, AllReduceMatchesTheReference) {
  RunRanks(OneHost(GetParam()), [](Communicator& comm) {
    absl::Status s = testing::CheckAllReduce(comm);
    EXPECT_TRUE(s.ok()) << s;
  });
}

// Every other collective still goes through Gloo, interleaved with shared-
// memory allreduces, with the automatic choice.
TEST(ShmTest, EveryCollectiveWithTheAutomaticChoice) {
  CommOptions options = ShmOptions();
  options.allreduce_algorithm = AllReduceAlgorithm::kAuto;
  RunRanks(
      OneHost(3),
      [](Communicator& comm) {
        absl::Status s = testing::CheckEverything(comm);
        EXPECT_TRUE(s.ok()) << s;
      },
      options);
}

// Two "hosts" of two ranks: shared memory inside each, Gloo between rank 0
// and rank 2 (the leaders).
TEST(ShmHierarchicalTest, TwoHostsOfTwoRanks) {
  RunRanks({"node-a", "node-a", "node-b", "node-b"}, [](Communicator& comm) {
    absl::Status s = testing::CheckAllReduce(comm);
    EXPECT_TRUE(s.ok()) << s;
  });
}

// Hosts interleaved by rank, one of them with a single rank (no segment).
TEST(ShmHierarchicalTest, UnevenInterleavedHosts) {
  RunRanks({"node-a", "node-b", "node-a", "node-c", "node-a"},
           [](Communicator& comm) {
             absl::Status s = testing::CheckAllReduce(comm);
             EXPECT_TRUE(s.ok()) << s;
           });
}

TEST(ShmHierarchicalTest, EveryCollectiveWithTheAutomaticChoice) {
  CommOptions options = ShmOptions();
  options.allreduce_algorithm = AllReduceAlgorithm::kAuto;
  RunRanks(
      {"node-a", "node-a", "node-b", "node-b"},
      [](Communicator& comm) {
        absl::Status s = testing::CheckEverything(comm);
        EXPECT_TRUE(s.ok()) << s;
      },
      options);
}

// A rank that never joins the allreduce: the others fail with the call's
// timeout instead of waiting in the segment for good.
TEST(ShmFailureTest, APeerThatNeverArrivesIsATimeoutNotAHang) {
  absl::Notification done;
  RunRanks(OneHost(2), [&](Communicator& comm) {
    std::vector<float> data(1 << 16, 1.0f);
    if (comm.rank() == 1) {
      done.WaitForNotificationWithTimeout(absl::Seconds(30));
      return;
    }
    CallOptions call;
    call.timeout = absl::Seconds(1);
    const absl::Time start = absl::Now();
    absl::Status s = comm.AllReduce(data.data(), data.data(), data.size(),
                                    DataType::kFloat32, ReduceOp::kSum, call);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << s;
    done.Notify();
  });
}

// A peer that crashes (every connection closed, its segment words marked)
// while the others wait in the segment: ABORTED naming it, within seconds.
TEST(ShmFailureTest, ACrashedPeerIsNamed) {
  RunRanks(OneHost(3), [](Communicator& comm) {
    std::vector<float> data(1 << 20, 1.0f);
    if (comm.rank() == 1) {
      absl::SleepFor(absl::Milliseconds(200));
      internal::CrashForTesting(comm);
      return;
    }
    const absl::Time start = absl::Now();
    absl::Status s;
    while (s.ok() && absl::Now() - start < absl::Seconds(30)) {
      s = comm.AllReduce(data.data(), data.data(), data.size(),
                         DataType::kFloat32, ReduceOp::kSum);
    }
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("peer rank 1")) << s;
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << s;
  });
}

// ---- The transport alone (no peer monitor) ----

// A Gloo stand-in that records what reaches it: allreduces must not.
class RecordingBackend final : public internal::Backend {
 public:
  explicit RecordingBackend(std::atomic<int>* runs) : runs_(runs) {}
  absl::string_view name() const override { return "gloo"; }
  absl::Status Run(const internal::Op&, absl::Time) override {
    ++*runs_;
    return absl::InternalError("the shared-memory path was not taken");
  }
  absl::StatusOr<std::unique_ptr<internal::PendingP2P>> Post(
      const internal::Op&) override {
    return absl::UnimplementedError("no p2p");
  }
  void Abort(const absl::Status&) override {}
  void Close() override {}

 private:
  std::atomic<int>* const runs_;
};

internal::CoreConfig BareConfig(std::shared_ptr<store::Store> store, int rank,
                                int n) {
  internal::CoreConfig config;
  config.rank = rank;
  config.world_size = n;
  config.store = std::move(store);
  config.key_prefix = "test/";
  config.options = ShmOptions();
  config.options.host_id = "host-a";
  config.hostname = "127.0.0.1";
  config.bind_ip = "127.0.0.1";
  config.all_local = true;
  return config;
}

internal::Op SumOp(std::vector<int32_t>& data) {
  internal::Op op;
  op.kind = internal::OpKind::kAllReduce;
  op.input = data.data();
  op.output = data.data();
  op.count = data.size();
  op.dtype = DataType::kInt32;
  op.op = ReduceOp::kSum;
  op.timeout = absl::Seconds(60);
  return op;
}

TEST(ShmTransportTest, AllReduceNeverReachesGloo) {
  auto store = std::make_shared<store::InMemoryStore>();
  std::atomic<int> gloo_runs{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto backend = internal::WithSharedMemory(
          BareConfig(store, r, 2),
          std::make_unique<RecordingBackend>(&gloo_runs),
          absl::Now() + absl::Seconds(30),
          /*connect_leaders=*/nullptr);
      ASSERT_TRUE(backend.ok()) << backend.status();
      for (size_t count : {size_t{3}, size_t{1} << 20}) {
        std::vector<int32_t> data(count, r + 1);
        absl::Status s =
            (*backend)->Run(SumOp(data), absl::Now() + absl::Seconds(30));
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_EQ(data.front(), 3);
        EXPECT_EQ(data.back(), 3);
      }
      (*backend)->Close();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(gloo_runs.load(), 0);
}

// A large output (written with non-temporal stores) at an address that is
// not 16-byte aligned, and a count that is no multiple of anything.
TEST(ShmTransportTest, ALargeMisalignedOutputIsComplete) {
  auto store = std::make_shared<store::InMemoryStore>();
  std::atomic<int> gloo_runs{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto backend = internal::WithSharedMemory(
          BareConfig(store, r, 3),
          std::make_unique<RecordingBackend>(&gloo_runs),
          absl::Now() + absl::Seconds(30),
          /*connect_leaders=*/nullptr);
      ASSERT_TRUE(backend.ok()) << backend.status();
      const size_t count = (3 << 20) + 5;  // 12 MB of int32, 6+ chunks.
      std::vector<int32_t> in(count);
      for (size_t i = 0; i < count; ++i)
        in[i] = static_cast<int32_t>(i) * (r + 1);
      std::vector<char> raw(count * sizeof(int32_t) + 16);
      char* out = raw.data() + 4;  // Not 16-byte aligned.
      std::vector<int32_t> data = in;
      internal::Op op = SumOp(data);
      op.input = in.data();
      op.output = out;
      absl::Status s = (*backend)->Run(op, absl::Now() + absl::Seconds(30));
      ASSERT_TRUE(s.ok()) << s;
      for (size_t i = 0; i < count; ++i) {
        int32_t got;
        std::memcpy(&got, out + i * sizeof(int32_t), sizeof(got));
        ASSERT_EQ(got, static_cast<int32_t>(i) * 6) << "element " << i;
      }
      (*backend)->Close();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(gloo_runs.load(), 0);
}

// A local peer's process is SIGKILLed between two allreduces, and nothing
// else (no peer monitor here) tells the survivor: the segment's liveness
// check names it within seconds.
TEST(ShmTransportTest, APeerProcessThatDiesIsNamedWithoutAMonitor) {
  char dir[] = "/tmp/muster-shm-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = absl::StrCat(dir, "/store");
  std::atomic<int> gloo_runs{0};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rank 1: one allreduce, then death mid-way through the next one's wait.
    auto store = store::FileStore::Open(path, 1);
    if (!store.ok()) _exit(10);
    auto backend = internal::WithSharedMemory(
        BareConfig(*store, 1, 2),
        std::make_unique<RecordingBackend>(&gloo_runs),
        absl::Now() + absl::Seconds(30),
        /*connect_leaders=*/nullptr);
    if (!backend.ok()) _exit(11);
    std::vector<int32_t> data(1000, 2);
    if (!(*backend)->Run(SumOp(data), absl::Now() + absl::Seconds(30)).ok()) {
      _exit(12);
    }
    absl::SleepFor(absl::Milliseconds(300));
    kill(getpid(), SIGKILL);
    _exit(13);
  }
  auto store = store::FileStore::Open(path, 0);
  ASSERT_TRUE(store.ok()) << store.status();
  auto backend = internal::WithSharedMemory(
      BareConfig(*store, 0, 2), std::make_unique<RecordingBackend>(&gloo_runs),
      absl::Now() + absl::Seconds(30),
      /*connect_leaders=*/nullptr);
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<int32_t> data(1000, 1);
  absl::Status first =
      (*backend)->Run(SumOp(data), absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(first.ok()) << first;
  EXPECT_EQ(data[999], 3);
  const absl::Time start = absl::Now();
  absl::Status second =
      (*backend)->Run(SumOp(data), absl::Now() + absl::Seconds(30));
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(absl::IsAborted(second)) << second;
  EXPECT_THAT(second.message(),
              HasSubstr(absl::StrCat("peer rank 1 (pid ", child, ")")));
  EXPECT_LT(took, absl::Seconds(5)) << second;
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
      << "child status " << wstatus;
  (*backend)->Close();
  EXPECT_EQ(gloo_runs.load(), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace muster::comm
