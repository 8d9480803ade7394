// The Store service and GrpcStore end to end: a real RendezvousServer on
// 127.0.0.1:0.
#include "muster/store/grpc_store.h"

#include <dirent.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/net.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/store.grpc.pb.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/wait.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::CallUnary;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::StartLoopbackServer;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(10);

int ThreadCount() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

class GrpcStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartLoopbackServer();
    ASSERT_NE(server_, nullptr);
    endpoint_ = LoopbackEndpoint(server_->port());
  }

  std::unique_ptr<store::Store> NewStore(const std::string& prefix) {
    auto store = store::NewGrpcStore({.endpoint = endpoint_, .prefix = prefix});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::unique_ptr<v1::Store::Stub> RawStub() {
    return v1::Store::NewStub(
        grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<RendezvousServer> server_;
  std::string endpoint_;
};

TEST_F(GrpcStoreTest, EveryOperation) {
  auto store = NewStore("job/1");
  ASSERT_NE(store, nullptr);

  ASSERT_TRUE(store->Set("a", "1").ok());
  auto a = store->Get("a", absl::ZeroDuration());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "1");
  EXPECT_EQ(store->Get("absent", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);

  // Binary values survive.
  const std::string blob("\0\x01\xff zero", 8);
  ASSERT_TRUE(store->Set("blob", blob).ok());
  EXPECT_EQ(*store->Get("blob", absl::ZeroDuration()), blob);

  auto n = store->Add("counter", 5);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5);
  EXPECT_EQ(*store->Add("counter", -2), 3);
  EXPECT_EQ(store->Add("blob", 1).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(*store->CompareSet("cas", "", "first"), "first");
  EXPECT_EQ(*store->CompareSet("cas", "wrong", "second"), "first");
  EXPECT_EQ(*store->CompareSet("cas", "first", "second"), "second");

  EXPECT_TRUE(store->Wait({"a", "cas"}, absl::Seconds(1)).ok());
  absl::Status missing = store->Wait({"a", "nope"}, absl::ZeroDuration());
  EXPECT_EQ(missing.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(missing.message(), HasSubstr("nope"));

  ASSERT_TRUE(store->MultiSet({"x", "y"}, {"10", "20"}).ok());
  auto xy = store->MultiGet({"y", "x"}, absl::ZeroDuration());
  ASSERT_TRUE(xy.ok()) << xy.status();
  EXPECT_THAT(*xy, ::testing::ElementsAre("20", "10"));
  auto partial = store->MultiGet({"x", "zz"}, absl::ZeroDuration());
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(partial.status().message(), HasSubstr("zz"));
  EXPECT_EQ(store->MultiSet({"x"}, {"1", "2"}).code(),
            absl::StatusCode::kInvalidArgument);

  auto keys = store->NumKeys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(*keys, 6);  // a blob counter cas x y
  EXPECT_TRUE(*store->Delete("x"));
  EXPECT_FALSE(*store->Delete("x"));
  EXPECT_EQ(*store->NumKeys(), 5);
}

TEST_F(GrpcStoreTest, BlockedGetIsWokenBySetFromAnotherClient) {
  auto waiter = NewStore("job/1");
  auto setter = NewStore("job/1");
  ASSERT_NE(waiter, nullptr);
  ASSERT_NE(setter, nullptr);
  absl::StatusOr<std::string> got;
  std::thread t([&] { got = waiter->Get("addr", kDeadline); });
  ASSERT_TRUE(WaitUntil([&] { return server_->store().PendingWaiters() == 1; },
                        kDeadline));
  const absl::Time set_at = absl::Now();
  ASSERT_TRUE(setter->Set("addr", "10.0.0.1:1234").ok());
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "10.0.0.1:1234");
  EXPECT_LT(absl::Now() - set_at, absl::Seconds(2));

  // MultiGet and Wait wake the same way.
  absl::StatusOr<std::vector<std::string>> both;
  absl::Status waited;
  std::thread m([&] { both = waiter->MultiGet({"p", "q"}, kDeadline); });
  std::thread w([&] { waited = waiter->Wait({"q"}, kDeadline); });
  ASSERT_TRUE(WaitUntil([&] { return server_->store().PendingWaiters() == 2; },
                        kDeadline));
  ASSERT_TRUE(setter->Set("p", "P").ok());
  ASSERT_TRUE(setter->Set("q", "Q").ok());
  m.join();
  w.join();
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(*both, ::testing::ElementsAre("P", "Q"));
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST_F(GrpcStoreTest, GetTimesOutNamingTheKey) {
  auto store = NewStore("job/1");
  ASSERT_NE(store, nullptr);
  const absl::Time start = absl::Now();
  auto got = store->Get("rank0/addr", absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded)
      << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("rank0/addr"));
  EXPECT_THAT(got.status().message(), HasSubstr("job/1"));
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(
                      3));  // the server's deadline, not the client's margin
  EXPECT_TRUE(WaitUntil([&] { return server_->store().PendingWaiters() == 0; },
                        kDeadline));

  absl::Status wait =
      store->Wait({"rank0/addr", "rank1/addr"}, absl::Milliseconds(100));
  EXPECT_EQ(wait.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(wait.message(), HasSubstr("rank1/addr"));
}

// A waiting Get holds no server thread: 200 of them wait at once, on a server
// whose process has far fewer threads, and all succeed when their keys are set.
TEST_F(GrpcStoreTest, TwoHundredWaitingGetsHoldNoThreads) {
  constexpr int kWaiters = 200;
  auto stub = RawStub();
  {
    // Warm up the channel and the server's callback threads.
    auto store = NewStore("job/7");
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Set("warm", "1").ok());
  }
  const int threads_before = ThreadCount();
  struct Call {
    grpc::ClientContext context;
    v1::GetRequest request;
    v1::GetResponse response;
  };
  std::vector<std::unique_ptr<Call>> calls;
  absl::Mutex mu;
  int done = 0;
  int ok = 0;
  for (int i = 0; i < kWaiters; ++i) {
    auto call = std::make_unique<Call>();
    call->request.set_prefix("job/7");
    call->request.set_key(absl::StrCat("k", i));
    call->request.set_timeout_ms(absl::ToInt64Milliseconds(kDeadline));
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + 2 * kDeadline));
    Call* c = call.get();
    stub->async()->Get(
        &c->context, &c->request, &c->response,
        [&mu, &done, &ok, c, i](grpc::Status s) {
          absl::MutexLock lock(&mu);
          ++done;
          if (s.ok() && c->response.value() == absl::StrCat("v", i)) ++ok;
        });
    calls.push_back(std::move(call));
  }
  ASSERT_TRUE(WaitUntil(
      [&] { return server_->store().PendingWaiters() == kWaiters; }, kDeadline))
      << server_->store().PendingWaiters();
  const int threads = ThreadCount();
  // A thread per waiting call would add 200; gRPC's pools may add a few.
  EXPECT_LT(threads - threads_before, 20)
      << threads_before << " threads before, " << threads << " while "
      << kWaiters << " wait";

  auto setter = NewStore("job/7");
  ASSERT_NE(setter, nullptr);
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(setter->Set(absl::StrCat("k", i), absl::StrCat("v", i)).ok());
  }
  absl::MutexLock lock(&mu);
  auto all_done = [&] { return done == kWaiters; };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all_done), kDeadline))
      << done;
  EXPECT_EQ(ok, kWaiters);
}

TEST_F(GrpcStoreTest, NamespacesAreIsolated) {
  auto round1 = NewStore("job/1");
  auto round2 = NewStore("job/2");
  auto other = NewStore("other/1");
  ASSERT_TRUE(round1->Set("k", "one").ok());
  ASSERT_TRUE(round2->Set("k", "two").ok());
  EXPECT_EQ(*round1->Get("k", absl::ZeroDuration()), "one");
  EXPECT_EQ(*round2->Get("k", absl::ZeroDuration()), "two");
  EXPECT_EQ(other->Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*round1->NumKeys(), 1);
  EXPECT_EQ(*other->NumKeys(), 0);
}

TEST_F(GrpcStoreTest, DroppedNamespaceAbortsItsWaiters) {
  auto store = NewStore("job/3");
  ASSERT_TRUE(store->Set("old", "x").ok());
  absl::StatusOr<std::string> got;
  std::thread t([&] { got = store->Get("never", kDeadline); });
  ASSERT_TRUE(WaitUntil([&] { return server_->store().PendingWaiters() == 1; },
                        kDeadline));
  server_->store().DropNamespace("job/3");
  t.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("job/3"));
  // The ended round's namespace stays closed: a late write cannot bring it
  // back, nor a wait park there for peers that are gone.
  EXPECT_EQ(store->Get("old", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kAborted);
  absl::Status late = store->Set("late", "x");
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
  EXPECT_THAT(late.message(), HasSubstr("round has ended"));
  EXPECT_EQ(store->Get("late", kDeadline).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(server_->store().NamespaceCount(), 0);
}

TEST_F(GrpcStoreTest, CancelledWaitIsReleasedOnTheServer) {
  auto stub = RawStub();
  v1::GetRequest request;
  request.set_prefix("job/1");
  request.set_key("k");
  request.set_timeout_ms(60'000);
  // The client gives up after 200 ms; the server would wait a minute.
  grpc::Status s = CallUnary(*stub, &v1::Store::Stub::Get, request,
                             /*token=*/"", absl::Milliseconds(200));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitUntil([&] { return server_->store().PendingWaiters() == 0; },
                        kDeadline))
      << "the server still waits for a call its client gave up";
}

TEST_F(GrpcStoreTest, RequestsAreValidated) {
  auto stub = RawStub();
  v1::SetRequest no_prefix;
  no_prefix.set_key("k");
  grpc::Status s = CallUnary(*stub, &v1::Store::Stub::Set, no_prefix);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("prefix"));

  v1::GetRequest no_key;
  no_key.set_prefix("job/1");
  no_key.set_timeout_ms(100);
  s = CallUnary(*stub, &v1::Store::Stub::Get, no_key);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("key"));

  v1::WaitRequest empty_key;
  empty_key.set_prefix("job/1");
  empty_key.add_keys("a");
  empty_key.add_keys("");
  EXPECT_EQ(CallUnary(*stub, &v1::Store::Stub::Wait, empty_key).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::GetRequest negative_timeout;
  negative_timeout.set_prefix("job/1");
  negative_timeout.set_key("k");
  negative_timeout.set_timeout_ms(-5);
  EXPECT_EQ(
      CallUnary(*stub, &v1::Store::Stub::Get, negative_timeout).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(store::NewGrpcStore({.endpoint = endpoint_, .prefix = ""})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      store::NewGrpcStore({.endpoint = "", .prefix = "job/1"}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(GrpcStoreUnreachableTest, NamesTheEndpointWithinTheConnectTimeout) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  const std::string endpoint = absl::StrCat("127.0.0.1:", *port);
  const absl::Time start = absl::Now();
  auto store =
      store::NewGrpcStore({.endpoint = endpoint,
                           .prefix = "job/1",
                           .connect_timeout = absl::Milliseconds(500)});
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr(endpoint));
  EXPECT_THAT(store.status().message(), HasSubstr("refused"));
}

}  // namespace
}  // namespace muster::rendezvous
