// Collectives on N = 1..4 ranks, each a thread with its own Communicator,
// bootstrapped through one shared InMemoryStore.
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/comm/communicator.h"
#include "muster/store/in_memory_store.h"
#include "muster/store/kv_store.h"

namespace muster::comm {
namespace {

using ::testing::HasSubstr;

// Generous enough for a loaded CI machine, small enough that a hang fails the
// test rather than ctest's timeout.
CommOptions TestOptions() {
  CommOptions options;
  options.timeout = absl::Seconds(30);
  return options;
}

// Runs body(comm) on `n` threads, one rank each, with communicators created on
// one shared store. Creation failures are test failures.
void RunRanks(int n, const std::function<void(Communicator&)>& body,
              std::shared_ptr<store::Store> store = nullptr) {
  if (store == nullptr) store = std::make_shared<store::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, n, TestOptions());
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status();
      ASSERT_EQ((*comm)->rank(), r);
      ASSERT_EQ((*comm)->world_size(), n);
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

// Small integers, exact in every type, so float results can be compared
// exactly.
template <typename T>
T Value(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) {
    return static_cast<T>(1 + (rank + i) % 2);  // <= 2^4 for N <= 4
  }
  return static_cast<T>(static_cast<int>((rank * 7 + i * 3) % 13) - 6);
}

template <typename T>
T Combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    default:
      return a;
  }
}

template <typename T>
void CheckAllReduce(Communicator& comm, ReduceOp op, size_t count) {
  std::vector<T> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = Value<T>(comm.rank(), i, op);
  ASSERT_TRUE(comm.AllReduce(absl::MakeSpan(data), op).ok());
  for (size_t i = 0; i < count; ++i) {
    T expected = Value<T>(0, i, op);
    for (int r = 1; r < comm.world_size(); ++r) {
      expected = Combine(expected, Value<T>(r, i, op), op);
    }
    ASSERT_EQ(data[i], expected)
        << "rank " << comm.rank() << " element " << i << " dtype "
        << DataTypeName(DataTypeOf<T>()) << " op " << ReduceOpName(op);
  }
}

template <typename T>
void CheckBroadcast(Communicator& comm, int root, size_t count) {
  std::vector<T> data(count);
  for (size_t i = 0; i < count; ++i) {
    data[i] = static_cast<T>(comm.rank() * 1000 + i);
  }
  ASSERT_TRUE(comm.Broadcast(absl::MakeSpan(data), root).ok());
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(data[i], static_cast<T>(root * 1000 + i))
        << "rank " << comm.rank() << " root " << root << " element " << i;
  }
}

template <typename T>
void CheckAllGather(Communicator& comm, size_t count, bool in_place) {
  const int n = comm.world_size();
  std::vector<T> output(count * n, static_cast<T>(-1));
  std::vector<T> input(count);
  for (size_t i = 0; i < count; ++i) {
    input[i] = static_cast<T>(comm.rank() * 100 + i);
  }
  absl::Status s;
  if (in_place) {
    std::copy(input.begin(), input.end(), output.begin() + comm.rank() * count);
    s = comm.AllGather(output.data() + comm.rank() * count, output.data(),
                       count, DataTypeOf<T>());
  } else {
    s = comm.AllGather(absl::Span<const T>(input), absl::MakeSpan(output));
  }
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(output[r * count + i], static_cast<T>(r * 100 + i))
          << "rank " << comm.rank() << " slot " << r << " element " << i;
    }
  }
}

class CommTest : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, CommTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) {
                           return absl::StrCat("N", info.param);
                         });

TEST_P(CommTest, AllReduceEveryDtypeAndOp) {
  RunRanks(GetParam(), [](Communicator& comm) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax}) {
      // 1 element (fewer than ranks) and 1001 (not a multiple of any world
      // size).
      for (size_t count : {size_t{1}, size_t{1001}}) {
        CheckAllReduce<float>(comm, op, count);
        CheckAllReduce<double>(comm, op, count);
        CheckAllReduce<int32_t>(comm, op, count);
        CheckAllReduce<int64_t>(comm, op, count);
      }
    }
  });
}

TEST_P(CommTest, AllReduceLargerThanOneSegment) {
  // Gloo's ring moves at most 1 MiB per send: 3 MB of floats takes several
  // segments per rank.
  RunRanks(GetParam(), [](Communicator& comm) {
    CheckAllReduce<float>(comm, ReduceOp::kSum, 750'001);
  });
}

TEST_P(CommTest, AllReduceVoidPointerAndEmpty) {
  RunRanks(GetParam(), [](Communicator& comm) {
    std::vector<int64_t> data = {comm.rank() + 1, 10};
    ASSERT_TRUE(comm.AllReduce(data.data(), data.size(), DataType::kInt64,
                               ReduceOp::kSum)
                    .ok());
    const int n = comm.world_size();
    EXPECT_EQ(data[0], n * (n + 1) / 2);
    EXPECT_EQ(data[1], 10 * n);
    // count == 0 returns at once, even with a null buffer.
    EXPECT_TRUE(
        comm.AllReduce(nullptr, 0, DataType::kFloat32, ReduceOp::kSum).ok());
  });
}

TEST_P(CommTest, BroadcastFromEveryRoot) {
  RunRanks(GetParam(), [](Communicator& comm) {
    for (int root = 0; root < comm.world_size(); ++root) {
      CheckBroadcast<float>(comm, root, 17);
      CheckBroadcast<double>(comm, root, 1);
      CheckBroadcast<int32_t>(comm, root, 1000);
      CheckBroadcast<int64_t>(comm, root, 5);
    }
  });
}

TEST_P(CommTest, AllGatherKeepsRankOrder) {
  RunRanks(GetParam(), [](Communicator& comm) {
    CheckAllGather<float>(comm, 3, /*in_place=*/false);
    CheckAllGather<double>(comm, 1, /*in_place=*/false);
    CheckAllGather<int32_t>(comm, 1000, /*in_place=*/false);
    CheckAllGather<int64_t>(comm, 7, /*in_place=*/false);
    CheckAllGather<int32_t>(comm, 9, /*in_place=*/true);
  });
}

TEST_P(CommTest, BarrierWaitsForALateRank) {
  const int n = GetParam();
  std::atomic<bool> late_rank_arrived{false};
  RunRanks(n, [&](Communicator& comm) {
    const bool late = comm.rank() == comm.world_size() - 1;
    const absl::Time start = absl::Now();
    if (late) {
      absl::SleepFor(absl::Milliseconds(300));
      late_rank_arrived = true;
    }
    ASSERT_TRUE(comm.Barrier().ok());
    EXPECT_TRUE(late_rank_arrived)
        << "rank " << comm.rank() << " left the barrier early";
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  });
}

TEST_P(CommTest, SecondCommunicatorOnTheSameStore) {
  const int n = GetParam();
  auto store = std::make_shared<store::InMemoryStore>();
  for (int round = 0; round < 2; ++round) {
    RunRanks(
        n,
        [](Communicator& comm) {
          CheckAllReduce<int32_t>(comm, ReduceOp::kSum, 10);
        },
        store);
  }
}

TEST(CommArgumentsTest,
     BadArgumentsAreInvalidArgumentAndLeaveTheCommunicatorUsable) {
  RunRanks(2, [](Communicator& comm) {
    std::vector<float> data(4, 1.0f);
    auto code = [](const absl::Status& s) { return s.code(); };
    const auto kInvalid = absl::StatusCode::kInvalidArgument;
    EXPECT_EQ(
        code(comm.AllReduce(nullptr, 4, DataType::kFloat32, ReduceOp::kSum)),
        kInvalid);
    EXPECT_EQ(code(comm.AllReduce(data.data(), 4, static_cast<DataType>(99),
                                  ReduceOp::kSum)),
              kInvalid);
    EXPECT_EQ(code(comm.AllReduce(data.data(), 4, DataType::kFloat32,
                                  static_cast<ReduceOp>(7))),
              kInvalid);
    EXPECT_EQ(code(comm.Broadcast(data.data(), 4, DataType::kFloat32, -1)),
              kInvalid);
    absl::Status s = comm.Broadcast(data.data(), 4, DataType::kFloat32, 2);
    EXPECT_EQ(code(s), kInvalid);
    EXPECT_THAT(s.message(), HasSubstr("root 2"));
    EXPECT_EQ(code(comm.Broadcast(nullptr, 4, DataType::kFloat32, 0)),
              kInvalid);
    std::vector<float> out(8);
    EXPECT_EQ(code(comm.AllGather(nullptr, out.data(), 4, DataType::kFloat32)),
              kInvalid);
    EXPECT_EQ(code(comm.AllGather(data.data(), nullptr, 4, DataType::kFloat32)),
              kInvalid);
    // Overlap other than this rank's own slot.
    EXPECT_EQ(
        code(comm.AllGather(out.data() + 1, out.data(), 4, DataType::kFloat32)),
        kInvalid);
    EXPECT_EQ(code(comm.AllGather(absl::Span<const float>(data),
                                  absl::MakeSpan(data))),
              kInvalid);
    // None of that broke the communicator.
    CheckAllReduce<float>(comm, ReduceOp::kSum, 4);
  });
}

TEST(CommArgumentsTest, CreateRejectsBadArguments) {
  auto store = std::make_shared<store::InMemoryStore>();
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(Communicator::Create(nullptr, 0, 1).status().code(), kInvalid);
  EXPECT_EQ(Communicator::Create(store, 0, 0).status().code(), kInvalid);
  EXPECT_EQ(Communicator::Create(store, -1, 2).status().code(), kInvalid);
  EXPECT_EQ(Communicator::Create(store, 2, 2).status().code(), kInvalid);
  CommOptions zero;
  zero.timeout = absl::ZeroDuration();
  EXPECT_EQ(Communicator::Create(store, 0, 1, zero).status().code(), kInvalid);
}

TEST(CommArgumentsTest, UnknownInterfaceIsAPreconditionNotACrash) {
  // Gloo 0.5.0 itself segfaults on such a name.
  CommOptions options = TestOptions();
  options.ifname = "nosuchif0";
  auto comm = Communicator::Create(std::make_shared<store::InMemoryStore>(), 0,
                                   1, options);
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition)
      << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("nosuchif0"));
  EXPECT_THAT(comm.status().message(), HasSubstr("MUSTER_SOCKET_IFNAME"));
}

TEST(CommTimeoutTest, ARankThatNeverJoinsFailsInitWithDeadlineExceeded) {
  CommOptions options;
  options.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  // Rank 1 of 2 never comes.
  auto comm = Communicator::Create(std::make_shared<store::InMemoryStore>(), 0,
                                   2, options);
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
      << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("rank 1 did not join"));
  EXPECT_LT(took, absl::Seconds(10));
}

TEST(CommTimeoutTest, ACollectiveThatAPeerNeverJoinsTimesOut) {
  std::shared_ptr<store::Store> store =
      std::make_shared<store::InMemoryStore>();
  absl::Notification done;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommOptions options;
      options.timeout = absl::Seconds(2);
      auto comm = Communicator::Create(store, r, 2, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      if (r == 0) {
        std::vector<float> data(8, 1.0f);
        absl::Status s =
            (*comm)->AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
        EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
        // The communicator is broken afterwards.
        EXPECT_EQ((*comm)->Barrier().code(), absl::StatusCode::kAborted);
        done.Notify();
      } else {
        done.WaitForNotification();  // Rank 1 never takes part, but stays
                                     // connected.
      }
    });
  }
  for (auto& t : threads) t.join();
}

// A store whose every call fails, as a GrpcStore does when musterd is gone.
class UnreachableStore : public store::Store {
 public:
  absl::Status Set(absl::string_view, absl::string_view) override {
    return Down();
  }
  absl::StatusOr<std::string> Get(absl::string_view, absl::Duration) override {
    return Down();
  }
  absl::StatusOr<int64_t> Add(absl::string_view, int64_t) override {
    return Down();
  }
  absl::StatusOr<std::string> CompareSet(absl::string_view, absl::string_view,
                                         absl::string_view) override {
    return Down();
  }
  absl::Status Wait(absl::Span<const std::string>, absl::Duration) override {
    return Down();
  }
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string>, absl::Duration) override {
    return Down();
  }
  absl::Status MultiSet(absl::Span<const std::string>,
                        absl::Span<const std::string>) override {
    return Down();
  }
  absl::StatusOr<bool> Delete(absl::string_view) override { return Down(); }
  absl::StatusOr<int64_t> NumKeys() override { return Down(); }

 private:
  static absl::Status Down() {
    return absl::UnavailableError("musterd is gone");
  }
};

TEST(CommFailureTest, AnUnreachableStoreIsUnavailable) {
  auto comm = Communicator::Create(std::make_shared<UnreachableStore>(), 0, 2,
                                   TestOptions());
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kUnavailable)
      << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("musterd is gone"));
}

TEST(CommFailureTest, ARoundDroppedWhileJoiningIsAborted) {
  // The store's namespace is dropped (the round ended) while rank 0 waits for
  // rank 1: the store's ABORTED comes back through Gloo unchanged, long before
  // the timeout.
  auto kv = std::make_shared<store::KvStore>();
  auto store = std::make_shared<store::InMemoryStore>(kv, "job/1");
  std::thread dropper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    kv->DropNamespace("job/1");
  });
  const absl::Time start = absl::Now();
  auto comm = Communicator::Create(store, 0, 2, TestOptions());
  dropper.join();
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kAborted) << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(CommFailureTest, APeerThatShutsDownIsReportedWithItsRank) {
  std::shared_ptr<store::Store> store =
      std::make_shared<store::InMemoryStore>();
  absl::Notification peer_gone;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommOptions options;
      options.timeout = absl::Seconds(5);
      auto comm = Communicator::Create(store, r, 2, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      if (r == 1) {
        (*comm)->Shutdown();
        EXPECT_EQ((*comm)->Barrier().code(),
                  absl::StatusCode::kFailedPrecondition);
        peer_gone.Notify();
        return;
      }
      peer_gone.WaitForNotification();
      std::vector<float> data(1024, 1.0f);
      absl::Status s = (*comm)->AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
      EXPECT_TRUE(absl::IsAborted(s) || absl::IsUnavailable(s)) << s;
      EXPECT_THAT(s.message(), HasSubstr("peer rank 1")) << s;
      EXPECT_THAT(s.message(), HasSubstr("rank 0/2: AllReduce")) << s;
    });
  }
  for (auto& t : threads) t.join();
}

// Sets environment variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.push_back(value ? std::optional<std::string>(value)
                             : std::nullopt);
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (size_t i = 0; i < std::size(kNames); ++i) {
      if (saved_[i]) {
        setenv(kNames[i], saved_[i]->c_str(), 1);
      } else {
        unsetenv(kNames[i]);
      }
    }
  }
  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_WORLD_SIZE",
                                           "MUSTER_STORE_ENDPOINT",
                                           "MUSTER_STORE_PREFIX",
                                           "MUSTER_COMM_TIMEOUT",
                                           "MUSTER_SOCKET_IFNAME",
                                           "GLOO_SOCKET_IFNAME"};

 private:
  std::vector<std::optional<std::string>> saved_;
};

TEST(CommEnvironmentTest, FromEnvironmentNamesEachMissingVariable) {
  ScopedEnv env;
  const std::vector<std::pair<const char*, const char*>> vars = {
      {"RANK", "0"},
      {"WORLD_SIZE", "1"},
      {"LOCAL_WORLD_SIZE", "1"},
      {"MUSTER_STORE_ENDPOINT", "127.0.0.1:1"},
      {"MUSTER_STORE_PREFIX", "job/1"}};
  for (const auto& [name, value] : vars) {
    auto comm = Communicator::FromEnvironment();
    ASSERT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition)
        << comm.status();
    EXPECT_THAT(comm.status().message(),
                HasSubstr(absl::StrCat("variable ", name, " is not set")));
    EXPECT_THAT(comm.status().message(),
                HasSubstr("run the program under muster"));
    setenv(name, value, 1);
  }
}

TEST(CommEnvironmentTest, FromEnvironmentRejectsMalformedValues) {
  ScopedEnv env;
  setenv("RANK", "zero", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("MUSTER_STORE_ENDPOINT", "127.0.0.1:1", 1);
  setenv("MUSTER_STORE_PREFIX", "job/1", 1);
  auto comm = Communicator::FromEnvironment();
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(comm.status().message(), HasSubstr("RANK='zero'"));
  setenv("RANK", "2", 1);
  comm = Communicator::FromEnvironment();
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(comm.status().message(), HasSubstr("RANK=2"));
}

// MUSTER_STORE_ENDPOINT may list every musterd replica; a malformed list is
// refused naming the variable and the forms it takes.
TEST(CommEnvironmentTest, StoreEndpointListsAreValidated) {
  ScopedEnv env;
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  setenv("MUSTER_STORE_PREFIX", "job/1", 1);
  setenv("MUSTER_STORE_ENDPOINT", "127.0.0.1:1,,127.0.0.1:2", 1);
  auto comm = Communicator::FromEnvironment();
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument)
      << comm.status();
  EXPECT_THAT(comm.status().message(),
              HasSubstr("MUSTER_STORE_ENDPOINT=127.0.0.1:1,,127.0.0.1:2"));
  EXPECT_THAT(comm.status().message(), HasSubstr("comma-separated"));
}

TEST(CommEnvironmentTest, BadTimeoutVariableIsInvalidArgument) {
  for (const char* bad : {"soon", "0", "-1", "inf", "5 parsecs"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env;
    setenv("MUSTER_COMM_TIMEOUT", bad, 1);
    auto comm =
        Communicator::Create(std::make_shared<store::InMemoryStore>(), 0, 1);
    ASSERT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(comm.status().message(),
                HasSubstr(absl::StrCat("MUSTER_COMM_TIMEOUT='", bad,
                                       "' is not a positive duration")));
  }
}

TEST(CommEnvironmentTest, TimeoutVariableOverridesTheOption) {
  ScopedEnv env;
  // The tree's duration syntax: "0.5" and "500ms" alike.
  setenv("MUSTER_COMM_TIMEOUT", "500ms", 1);
  const absl::Time start = absl::Now();
  // Rank 1 never joins; the 30 minutes of the options give way to the
  // variable's 0.5 s.
  auto comm =
      Communicator::Create(std::make_shared<store::InMemoryStore>(), 0, 2);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
      << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(CommEnvironmentTest, InterfaceVariableIsUsed) {
  ScopedEnv env;
  setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  RunRanks(2, [](Communicator& comm) {
    CheckAllReduce<float>(comm, ReduceOp::kMax, 3);
  });
  setenv("MUSTER_SOCKET_IFNAME", "nosuchif0",
         1);  // Wins over GLOO_SOCKET_IFNAME.
  auto comm =
      Communicator::Create(std::make_shared<store::InMemoryStore>(), 0, 1);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition)
      << comm.status();
}

TEST(CommLifecycleTest, SigpipeIsIgnoredSoALostPeerCannotKillTheProcess) {
  RunRanks(1, [](Communicator&) {});
  struct sigaction current;
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_IGN);
}

TEST(CommLifecycleTest, CollectivesAfterShutdownFailWithFailedPrecondition) {
  RunRanks(1, [](Communicator& comm) {
    comm.Shutdown();
    comm.Shutdown();  // Idempotent.
    int32_t x = 1;
    EXPECT_EQ(comm.AllReduce(&x, 1, DataType::kInt32, ReduceOp::kSum).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
  });
}

TEST(CommTypesTest, DataTypesAndNames) {
  static_assert(DataTypeOf<float>() == DataType::kFloat32);
  static_assert(DataTypeOf<double>() == DataType::kFloat64);
  static_assert(DataTypeOf<int32_t>() == DataType::kInt32);
  static_assert(DataTypeOf<int64_t>() == DataType::kInt64);
  EXPECT_EQ(DataTypeSize(DataType::kFloat64), 8u);
  EXPECT_EQ(DataTypeSize(static_cast<DataType>(42)), 0u);
  EXPECT_EQ(DataTypeName(DataType::kInt32), "int32");
  EXPECT_EQ(ReduceOpName(ReduceOp::kProduct), "product");
}

}  // namespace
}  // namespace muster::comm
