// libmuster_comm with N ranks as threads on one InMemoryStore: every
// collective x dtype x op against a reference (collective_checks.h), every
// allreduce algorithm, subgroups, asynchronous work, per-call timeouts, the
// failure paths (a crashed peer, the round ended by the launcher, a peer's
// timeout), progress, element types and interface selection.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sys/socket.h>
#endif

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/api/init.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/gloo_mesh.h"
#include "comm/src/progress_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/comm/communicator.h"
#include "muster/comm/progress.h"
#include "muster/store/in_memory_store.h"
#include "muster/store/kv_store.h"
#include "tests/comm/collective_checks.h"

namespace muster::comm {
namespace {

using ::testing::HasSubstr;

CommOptions TestOptions() {
  CommOptions options;
  options.timeout = absl::Seconds(60);
  return options;
}

// Runs body(comm) on n threads, one rank each, on one shared store.
void RunRanks(int n, const std::function<void(Communicator&)>& body,
              CommOptions options = TestOptions(),
              std::shared_ptr<store::Store> store = nullptr) {
  if (store == nullptr) store = std::make_shared<store::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, n, options);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status();
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest,
                         ::testing::Values(1, 2, 3, 4), [](const auto& info) {
                           return absl::StrCat("N", info.param);
                         });

TEST_P(CollectivesTest, EveryCollectiveDtypeAndOpMatchesTheReference) {
  RunRanks(GetParam(), [](Communicator& comm) {
    absl::Status s = testing::CheckEverything(comm);
    EXPECT_TRUE(s.ok()) << s;
  });
}

// Each of Gloo's allreduce algorithms, forced, on every dtype and op (the
// halving-doubling and bcube paths for non-powers of two included).
class AlgorithmTest
    : public ::testing::TestWithParam<std::tuple<AllReduceAlgorithm, int>> {};

INSTANTIATE_TEST_SUITE_P(
    Algorithms, AlgorithmTest,
    ::testing::Combine(::testing::Values(AllReduceAlgorithm::kRing,
                                         AllReduceAlgorithm::kRingChunked,
                                         AllReduceAlgorithm::kHalvingDoubling,
                                         AllReduceAlgorithm::kBcube,
                                         AllReduceAlgorithm::kRingUnbound,
                                         AllReduceAlgorithm::kBcubeUnbound),
                       ::testing::Values(2, 3, 4)),
    [](const auto& info) {
      return absl::StrCat(AllReduceAlgorithmName(std::get<0>(info.param)), "_N",
                          std::get<1>(info.param));
    });

TEST_P(AlgorithmTest, AllReduceMatchesTheReference) {
  CommOptions options = TestOptions();
  options.allreduce_algorithm = std::get<0>(GetParam());
  RunRanks(
      std::get<1>(GetParam()),
      [](Communicator& comm) {
        absl::Status s = testing::CheckAllReduce(comm);
        EXPECT_TRUE(s.ok()) << s;
      },
      options);
}

#ifdef __linux__
// Sockets of this process whose send buffer is at least `bytes` (as Linux
// reports it: twice what was set).
int SocketsWithSendBufferOf(int bytes) {
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
    int value = 0;
    socklen_t len = sizeof(value);
    if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, &len) == 0 &&
        value >= bytes) {
      ++n;
    }
  }
  return n;
}

// Gloo's bound buffers size a pair's send buffer to each message, and the
// first small one would pin it near the minimum (gloo_mesh.cc): each rank
// sizes its pairs' send buffers to the maximum right before its first
// algorithm class runs, and not at connect (4 MB to every peer, most of an
// in-place recovery), nor for the option-based collectives.
TEST(SendBufferTest, SizedAtTheFirstAlgorithmClassNotAtConnect) {
  constexpr int kN = 2;
  const int pinned = 2 * static_cast<int>(internal::SendBufferPinBytes());
  const int before = SocketsWithSendBufferOf(pinned);
  CommOptions options = TestOptions();
  options.allreduce_algorithm = AllReduceAlgorithm::kRing;
  auto store = std::make_shared<store::InMemoryStore>();
  absl::Barrier* connected = new absl::Barrier(kN + 1);
  absl::Barrier* broadcast = new absl::Barrier(kN + 1);
  absl::Barrier* counted = new absl::Barrier(kN + 1);
  absl::Barrier* reduced = new absl::Barrier(kN + 1);
  absl::Barrier* done = new absl::Barrier(kN + 1);
  auto block = [](absl::Barrier* b) {
    if (b->Block()) delete b;
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kN; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, kN, options);
      EXPECT_TRUE(comm.ok()) << comm.status();
      block(connected);
      std::vector<float> data(16, static_cast<float>(r + 1));
      if (comm.ok()) {
        EXPECT_TRUE((*comm)->Broadcast(absl::MakeSpan(data), 0).ok());
      }
      block(broadcast);
      block(counted);
      if (comm.ok()) {
        EXPECT_TRUE(
            (*comm)->AllReduce(absl::MakeSpan(data), ReduceOp::kSum).ok());
        EXPECT_EQ(data[0], 2.0f);  // Rank 0's 1, broadcast, from both.
      }
      block(reduced);
      block(done);  // The sockets stay open until counted.
    });
  }
  block(connected);
  EXPECT_EQ(SocketsWithSendBufferOf(pinned), before) << "after connect";
  block(broadcast);
  EXPECT_EQ(SocketsWithSendBufferOf(pinned), before) << "after a Broadcast";
  block(counted);
  block(reduced);
  // Each rank's end of their pair.
  EXPECT_GE(SocketsWithSendBufferOf(pinned), before + kN)
      << "after an AllreduceRing";
  block(done);
  for (auto& t : threads) t.join();
}
#endif  // __linux__

// MUSTER_GLOO_SYNC_BYTES=0: no sync-mode mesh; small messages take the usual
// one (the path every message took before it existed).
TEST(AlgorithmTest, WithoutTheSyncMeshSmallMessagesStillMatchTheReference) {
  ASSERT_EQ(setenv("MUSTER_GLOO_SYNC_BYTES", "0", 1), 0);
  for (int n : {2, 3}) {
    RunRanks(n, [](Communicator& comm) {
      absl::Status s = testing::CheckAllReduce(comm);
      EXPECT_TRUE(s.ok()) << s;
    });
  }
  unsetenv("MUSTER_GLOO_SYNC_BYTES");
}

TEST(AlgorithmChoiceTest, ByMessageSizeAndRankCount) {
  using internal::ChooseAllReduceAlgorithm;
  EXPECT_EQ(ChooseAllReduceAlgorithm(8, 2), AllReduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllReduceAlgorithm(512 << 10, 2), AllReduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllReduceAlgorithm((1 << 20) - 4, 2),
            AllReduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllReduceAlgorithm(1 << 20, 2),
            AllReduceAlgorithm::kRingUnbound);
  EXPECT_EQ(ChooseAllReduceAlgorithm(8, 4),
            AllReduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllReduceAlgorithm(1 << 20, 3),
            AllReduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllReduceAlgorithm(256 << 20, 4),
            AllReduceAlgorithm::kBcubeUnbound);
}

TEST(SubgroupTest, GroupsOfAParentWorkIndependently) {
  RunRanks(4, [](Communicator& comm) {
    const int me = comm.rank();
    // {1, 3}: ranks 1 and 3 become 0 and 1 (sorted order).
    auto odd = comm.NewGroup({3, 1});
    ASSERT_TRUE(odd.ok()) << odd.status();
    auto first3 = comm.NewGroup({0, 1, 2});
    ASSERT_TRUE(first3.ok()) << first3.status();
    if (me % 2 == 1) {
      ASSERT_NE(*odd, nullptr);
      EXPECT_EQ((*odd)->world_size(), 2);
      EXPECT_EQ((*odd)->rank(), me / 2);
      int32_t x = me;
      ASSERT_TRUE(
          (*odd)->AllReduce(&x, 1, DataType::kInt32, ReduceOp::kSum).ok());
      EXPECT_EQ(x, 1 + 3);
      absl::Status s = testing::CheckReduceScatterAndAllToAll(**odd);
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(*odd, nullptr);
    }
    if (me < 3) {
      ASSERT_NE(*first3, nullptr);
      EXPECT_EQ((*first3)->rank(), me);
      absl::Status s = testing::CheckBroadcast(**first3);
      EXPECT_TRUE(s.ok()) << s;
      s = testing::CheckGathers(**first3);
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(*first3, nullptr);
    }
    // The parent still works, and a second group of the same list is a new
    // communicator.
    int64_t y = 1;
    ASSERT_TRUE(comm.AllReduce(&y, 1, DataType::kInt64, ReduceOp::kSum).ok());
    EXPECT_EQ(y, 4);
    auto again = comm.NewGroup({1, 3});
    ASSERT_TRUE(again.ok()) << again.status();
    if (me % 2 == 1) {
      ASSERT_TRUE((*again)->Barrier().ok());
      (*odd)->Shutdown();  // One group shut down, the other goes on.
      float z = 2;
      ASSERT_TRUE((*again)
                      ->AllReduce(&z, 1, DataType::kFloat32, ReduceOp::kProduct)
                      .ok());
      EXPECT_EQ(z, 4);
    }
  });
}

TEST(SubgroupTest, BadListsAreInvalidArguments) {
  RunRanks(2, [](Communicator& comm) {
    EXPECT_EQ(comm.NewGroup({}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.NewGroup({0, 2}).status().code(),
              absl::StatusCode::kInvalidArgument);
    auto dup = comm.NewGroup({1, 1});
    EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(dup.status().message(), HasSubstr("listed twice"));
  });
}

TEST(ArgumentsTest, MisuseIsInvalidArgumentAndHarmless) {
  RunRanks(2, [](Communicator& comm) {
    const auto kInvalid = absl::StatusCode::kInvalidArgument;
    std::vector<float> buf(8, 1.0f);
    // ReduceScatter: output overlapping the input elsewhere than its block.
    EXPECT_EQ(comm.ReduceScatter(buf.data(), buf.data() + 1, 4,
                                 DataType::kFloat32, ReduceOp::kSum)
                  .code(),
              kInvalid);
    // AllGatherV with a count per rank missing.
    std::vector<size_t> counts = {1};
    EXPECT_EQ(
        comm.AllGatherV(buf.data(), buf.data() + 4, counts, DataType::kFloat32)
            .code(),
        kInvalid);
    // Send to itself, to nobody.
    absl::Status s = comm.Send(buf.data(), 1, DataType::kFloat32, comm.rank());
    EXPECT_EQ(s.code(), kInvalid);
    EXPECT_THAT(s.message(), HasSubstr("is this rank"));
    EXPECT_EQ(comm.Recv(buf.data(), 1, DataType::kFloat32, 5).code(), kInvalid);
    // AllToAll in place.
    EXPECT_EQ(
        comm.AllToAll(buf.data(), buf.data(), 2, DataType::kFloat32).code(),
        kInvalid);
    // Reduce with an unknown op; Gather with no output on the root.
    EXPECT_EQ(comm.Reduce(buf.data(), buf.data(), 1, DataType::kFloat32,
                          static_cast<ReduceOp>(9), 0)
                  .code(),
              kInvalid);
    EXPECT_EQ(
        comm.Gather(buf.data(), nullptr, 1, DataType::kFloat32, comm.rank())
            .code(),
        kInvalid);
    // The asynchronous variants validate at once.
    EXPECT_EQ(comm.StartBroadcast(buf.data(), 1, DataType::kFloat32, 7)
                  .status()
                  .code(),
              kInvalid);
    // Still usable.
    float x = 1;
    ASSERT_TRUE(comm.AllReduce(&x, 1, DataType::kFloat32, ReduceOp::kAvg).ok());
    EXPECT_EQ(x, 1);
  });
}

// ---- Failures ----

TEST(FailureTest, APeerThatCrashesMidAllReduceIsNamedWithinSeconds) {
  auto store = std::make_shared<store::InMemoryStore>();
  constexpr int kN = 4;
  absl::Barrier* started = new absl::Barrier(kN);
  std::vector<std::thread> threads;
  for (int r = 0; r < kN; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, kN, TestOptions());
      ASSERT_TRUE(comm.ok()) << comm.status();
      if (started->Block()) delete started;
      if (r == 2) {
        // Rank 2 never enters the AllReduce: it "dies" 300 ms in, as a
        // killed process would (connections closed, no goodbye).
        absl::SleepFor(absl::Milliseconds(300));
        internal::CrashForTesting(**comm);
        return;
      }
      std::vector<float> data(1 << 16, 1.0f);
      const absl::Time start = absl::Now();
      absl::Status s = (*comm)->AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
      const absl::Duration took = absl::Now() - start;
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
      EXPECT_THAT(s.message(), HasSubstr("peer rank 2"));
      EXPECT_THAT(s.message(),
                  HasSubstr(absl::StrCat("rank ", r, "/4: AllReduce")));
      EXPECT_LT(took, absl::Seconds(5)) << s;
      // Broken from now on, with the same cause.
      absl::Status after = (*comm)->Barrier();
      EXPECT_EQ(after.code(), absl::StatusCode::kAborted);
      EXPECT_THAT(after.message(), HasSubstr("peer rank 2"));
    });
  }
  for (auto& t : threads) t.join();
}

TEST(FailureTest, TheLauncherEndingTheRoundAbortsACollectiveInFlight) {
  // musterd drops the round's namespace when a worker fails: every rank's
  // monitor sees its store wait end with ABORTED.
  auto kv = std::make_shared<store::KvStore>();
  auto store = std::make_shared<store::InMemoryStore>(kv, "job/3");
  absl::Notification created[2];
  absl::Notification rank0_done;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, 2, TestOptions());
      ASSERT_TRUE(comm.ok()) << comm.status();
      created[r].Notify();
      if (r == 1) {
        // Rank 1 is "hung": it never joins the AllReduce, and keeps its
        // connections open until rank 0 is done, so only the abort can end
        // rank 0's wait.
        rank0_done.WaitForNotificationWithTimeout(absl::Seconds(20));
        return;
      }
      std::vector<double> data(16, 1.0);
      const absl::Time start = absl::Now();
      absl::Status s = (*comm)->AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
      EXPECT_THAT(s.message(), HasSubstr("launcher ended this round"));
      EXPECT_LT(absl::Now() - start, absl::Seconds(5));
      rank0_done.Notify();
    });
  }
  created[0].WaitForNotification();
  created[1].WaitForNotification();
  absl::SleepFor(absl::Milliseconds(300));
  kv->DropNamespace("job/3");
  for (auto& t : threads) t.join();
}

TEST(FailureTest, APerCallTimeoutFailsOnlyThatCallAndTellsThePeers) {
  auto store = std::make_shared<store::InMemoryStore>();
  absl::Notification timed_out;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, 2, TestOptions());
      ASSERT_TRUE(comm.ok()) << comm.status();
      if (r == 0) {
        int32_t x = 1;
        CallOptions call;
        call.timeout = absl::Milliseconds(500);
        const absl::Time start = absl::Now();
        absl::Status s =
            (*comm)->AllReduce(&x, 1, DataType::kInt32, ReduceOp::kSum, call);
        EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
        EXPECT_THAT(s.message(), HasSubstr("did not finish within 500ms"));
        EXPECT_LT(absl::Now() - start, absl::Seconds(3));
        timed_out.Notify();
        return;
      }
      timed_out.WaitForNotification();
      // Rank 1 arrives late: rank 0 has told it why it gave up.
      absl::SleepFor(absl::Milliseconds(200));
      int32_t y = 1;
      absl::Status s =
          (*comm)->AllReduce(&y, 1, DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
      EXPECT_THAT(s.message(), HasSubstr("peer rank 0"));
      EXPECT_THAT(s.message(), HasSubstr("did not finish within 500ms"));
    });
  }
  for (auto& t : threads) t.join();
}

TEST(WorkTest, WaitWithATimeoutReportsStillRunningThenTheResult) {
  auto store = std::make_shared<store::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, 2, TestOptions());
      ASSERT_TRUE(comm.ok()) << comm.status();
      if (r == 1) absl::SleepFor(absl::Milliseconds(500));
      int64_t x = r + 1;
      auto work =
          (*comm)->StartAllReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum);
      ASSERT_TRUE(work.ok()) << work.status();
      if (r == 0) {
        absl::Status early = (*work)->Wait(absl::Milliseconds(50));
        EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded);
        EXPECT_THAT(early.message(), HasSubstr("still running"));
        EXPECT_FALSE((*work)->Done());
      }
      ASSERT_TRUE((*work)->Wait(absl::Seconds(30)).ok());
      EXPECT_TRUE((*work)->Done());
      EXPECT_EQ(x, 3);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(WorkTest, ShutdownWaitsForQueuedWork) {
  RunRanks(2, [](Communicator& comm) {
    std::vector<int32_t> data(1000, 1);
    auto work = comm.StartAllReduce(data.data(), data.data(), data.size(),
                                    DataType::kInt32, ReduceOp::kSum);
    ASSERT_TRUE(work.ok());
    comm.Shutdown();
    EXPECT_TRUE((*work)->Done());
    EXPECT_TRUE((*work)->Wait().ok());
    EXPECT_EQ(data[999], 2);
    EXPECT_EQ(comm.StartBarrier().status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(comm.NewGroup({0, 1}).status().code(),
              absl::StatusCode::kFailedPrecondition);
  });
}

// ---- Progress ----

TEST(ProgressTest, CollectivesAndReportProgressUpdateTheFile) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            absl::StrCat("muster-progress-", getpid(), ".txt"))
                               .string();
  CommOptions options = TestOptions();
  options.progress_file = path;
  std::atomic<int> done{0};
  RunRanks(
      2,
      [&](Communicator& comm) {
        for (int i = 0; i < 5; ++i) ASSERT_TRUE(comm.Barrier().ok());
        ++done;
      },
      options);
  ASSERT_EQ(done.load(), 2);
  auto before = ReadProgressFile(path);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->pid, getpid());
  // Both ranks (threads of this process) share the file: 2 x (5 barriers +
  // the one that confirms the connection).
  EXPECT_EQ(before->started, 12u);
  EXPECT_EQ(before->finished, 12u);
  EXPECT_EQ(before->current, "-");
  EXPECT_GT(before->updated_unix_ms, absl::ToUnixMillis(absl::Now()) - 60000);
  ASSERT_TRUE(ReportProgress().ok());
  auto after = ReadProgressFile(path);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->reported, before->reported + 1);
  EXPECT_GE(after->updated_unix_ms, before->updated_unix_ms);
  std::filesystem::remove(path);
  EXPECT_EQ(ReadProgressFile(path).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ProgressTest, TheSpeedCountersSplitWorkFromCollectives) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("muster-progress-speed-", getpid(), ".txt"))
          .string();
  CommOptions options = TestOptions();
  options.progress_file = path;
  RunRanks(
      2,
      [&](Communicator& comm) {
        ASSERT_TRUE(comm.Barrier().ok());
        // 3 x 100 ms of "work" between collectives, on both ranks at once.
        for (int i = 0; i < 3; ++i) {
          absl::SleepFor(absl::Milliseconds(100));
          ASSERT_TRUE(comm.Barrier().ok());
        }
      },
      options);
  auto snap = ReadProgressFile(path);
  ASSERT_TRUE(snap.ok()) << snap.status();
  // The sleeps are work (the ranks share the file: time counts once while
  // neither is in a collective), not waiting.
  EXPECT_GE(snap->compute_us, 250000u);
  EXPECT_LT(snap->compute_us, 60000000u);
  EXPECT_GT(snap->wait_us, 0u);
  std::filesystem::remove(path);
}

// The layout every writer shares (libmuster_comm here,
// python/muster/progress.py in tests/python/progress_test.py): a fresh file,
// digits masked, is the golden file.
TEST(ProgressTest, AFreshFileHasTheSharedLayout) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("muster-progress-layout-", getpid(), ".txt"))
          .string();
  ASSERT_TRUE(internal::ProgressFile::Open(path).ok());
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string text = read(path);
  for (size_t i = sizeof("muster-progress 2") - 1; i < text.size(); ++i) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) text[i] = '0';
  }
  const std::string golden =
      read((std::filesystem::path(__FILE__).parent_path().parent_path() /
            "testdata/progress/fresh.golden")
               .string());
  ASSERT_EQ(golden.size(), kProgressFileSize);
  EXPECT_EQ(text, golden);
  std::filesystem::remove(path);
}

TEST(ProgressTest, AFormatOneFileReadsWithoutSpeedCounters) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("muster-progress-v1-", getpid(), ".txt"))
          .string();
  std::ofstream(path) << "muster-progress 1\npid 0000001234\n"
                         "updated_unix_ms 0001763456789012\n"
                         "started 00000000000000000042\n"
                         "finished 00000000000000000041\n"
                         "reported 00000000000000000007\n"
                         "current AllReduce                \n"
                         "since_unix_ms 0001763456789000\n";
  auto snap = ReadProgressFile(path);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->finished, 41u);
  EXPECT_EQ(snap->current, "AllReduce");
  EXPECT_EQ(snap->compute_us, 0u);
  EXPECT_EQ(snap->wait_us, 0u);
  std::filesystem::remove(path);
}

// ---- Element types ----

TEST(TypesTest, HalfPrecisionConversionsRoundToNearestEven) {
  EXPECT_EQ(Float16::FromFloat(1.0f).bits, 0x3c00);
  EXPECT_EQ(Float16::FromFloat(-2.0f).bits, 0xc000);
  EXPECT_EQ(Float16::FromFloat(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Float16::FromFloat(65520.0f).bits, 0x7c00);  // rounds to inf
  EXPECT_EQ(Float16::FromFloat(5.9604645e-8f).bits,
            0x0001);  // smallest denormal
  EXPECT_EQ(Float16::FromFloat(1.0f + 1.0f / 2048).bits, 0x3c00);  // tie: even
  EXPECT_EQ(Float16::FromFloat(1.0f + 3.0f / 2048).bits, 0x3c02);  // tie: even
  EXPECT_TRUE(std::isnan(Float16::FromFloat(NAN).ToFloat()));
  for (int v = -2048; v <= 2048; ++v) {
    ASSERT_EQ(Float16::FromFloat(static_cast<float>(v)).ToFloat(),
              static_cast<float>(v));
  }
  EXPECT_EQ(Float16{0x0001}.ToFloat(), 5.9604645e-8f);
  EXPECT_EQ(BFloat16::FromFloat(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16::FromFloat(1.0f + 1.0f / 256).bits, 0x3f80);  // tie: even
  EXPECT_EQ(BFloat16::FromFloat(1.0f + 3.0f / 256).bits, 0x3f82);
  EXPECT_EQ(BFloat16{0xc040}.ToFloat(), -3.0f);
  EXPECT_TRUE(std::isnan(BFloat16::FromFloat(NAN).ToFloat()));
  static_assert(DataTypeOf<Float16>() == DataType::kFloat16);
  static_assert(DataTypeOf<const uint8_t>() == DataType::kUInt8);
  EXPECT_EQ(DataTypeSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(DataTypeName(DataType::kInt8), "int8");
  EXPECT_EQ(ReduceOpName(ReduceOp::kAvg), "avg");
}

// ---- Interfaces ----

TEST(InterfaceTest, NcclSyntaxIsAccepted) {
  auto lo = internal::SelectInterface("lo", "TEST");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(lo->name, "lo");
  EXPECT_EQ(lo->ip, "127.0.0.1");
  EXPECT_TRUE(internal::SelectInterface("=lo", "TEST").ok());
  // "=l" names no interface exactly; "l" is a prefix of lo.
  EXPECT_EQ(internal::SelectInterface("=l", "TEST").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(internal::SelectInterface("l", "TEST").ok());
  // An exclusion list never picks loopback while something else is up.
  auto not_docker = internal::SelectInterface("^docker", "TEST");
  ASSERT_TRUE(not_docker.ok()) << not_docker.status();
  auto all = internal::SelectInterface("^=nothing-at-all", "TEST");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(not_docker->name, all->name);
  auto none =
      internal::SelectInterface("nosuch0,nosuch1", "MUSTER_SOCKET_IFNAME");
  ASSERT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(),
              HasSubstr("MUSTER_SOCKET_IFNAME='nosuch0,nosuch1'"));
  EXPECT_THAT(none.status().message(), HasSubstr("lo 127.0.0.1"));
}

TEST(InterfaceTest, ExcludingLoopbackStillConnects) {
  // "^lo": the routable interface, as a multi-node job would use.
  CommOptions options = TestOptions();
  options.ifname = "^lo";
  auto choice = internal::SelectInterface("^lo", "TEST");
  if (!choice.ok() || choice->name == "lo") {
    GTEST_SKIP() << "this machine has no interface but loopback";
  }
  RunRanks(
      2,
      [](Communicator& comm) {
        int32_t x = comm.rank();
        ASSERT_TRUE(
            comm.AllReduce(&x, 1, DataType::kInt32, ReduceOp::kMax).ok());
        EXPECT_EQ(x, 1);
      },
      options);
}

}  // namespace
}  // namespace muster::comm
