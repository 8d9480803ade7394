#include "muster/rendezvous/kv_store.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/in_memory_store.h"

namespace muster::rendezvous {
namespace {

TEST(KvStoreTest, SetGetAddCompareSet) {
  KvStore kv;
  kv.Set("j/1", "a", "x");
  EXPECT_EQ(*kv.Get("j/1", "a"), "x");
  EXPECT_EQ(kv.Get("j/2", "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*kv.Add("j/1", "n", 5), 5);
  EXPECT_EQ(*kv.Add("j/1", "n", -2), 3);
  EXPECT_EQ(kv.Add("j/1", "a", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.CompareSet("j/1", "c", "", "first"), "first");
  EXPECT_EQ(kv.CompareSet("j/1", "c", "wrong", "second"), "first");
  EXPECT_EQ(kv.CompareSet("j/1", "c", "first", "second"), "second");
  EXPECT_EQ(kv.NumKeys("j/1"), 3);
  EXPECT_TRUE(kv.Delete("j/1", "c"));
  EXPECT_FALSE(kv.Delete("j/1", "c"));
  EXPECT_FALSE(kv.MultiSet("j/1", {"a", "b"}, {"1"}).ok());
}

TEST(KvStoreTest, WaiterWakesOnSetAndNamespacesAreSeparate) {
  KvStore kv;
  std::vector<std::string> got;
  int calls = 0;
  auto id = kv.WaitFor("j/2", {"a", "b"},
                       [&](absl::StatusOr<std::vector<std::string>> v) {
                         ASSERT_TRUE(v.ok());
                         got = *v;
                         ++calls;
                       });
  EXPECT_NE(id, 0u);
  kv.Set("j/1", "a", "other-round");
  kv.Set("j/2", "a", "1");
  EXPECT_EQ(calls, 0);
  kv.Set("j/2", "b", "2");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(kv.PendingWaiters(), 0);
}

TEST(KvStoreTest, CancelNamesMissingKeysAndDropAborts) {
  KvStore kv;
  absl::Status why;
  auto id = kv.WaitFor(
      "j/1", {"present", "missing"},
      [&](absl::StatusOr<std::vector<std::string>> v) { why = v.status(); });
  kv.Set("j/1", "present", "1");
  kv.CancelWait(id, absl::DeadlineExceededError("timed out"));
  EXPECT_EQ(why.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(why.message().find("missing"), std::string::npos) << why;
  EXPECT_EQ(why.message().find("present,"), std::string::npos) << why;

  kv.WaitFor("j/3", {"k"}, [&](absl::StatusOr<std::vector<std::string>> v) {
    why = v.status();
  });
  kv.DropNamespacesWithPrefix("j/");
  EXPECT_EQ(why.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(kv.NamespaceCount(), 0);
}

TEST(InMemoryStoreTest, GetBlocksUntilAnotherThreadSets) {
  auto kv = std::make_shared<KvStore>();
  InMemoryStore a(kv, "ns"), b(kv, "ns");
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(b.Set("k", "v").ok());
  });
  auto v = a.Get("k", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
}

TEST(InMemoryStoreTest, GetTimesOutNamingKey) {
  InMemoryStore s;
  absl::Time start = absl::Now();
  auto v = s.Get("never", absl::Milliseconds(100));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("never"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.Get("never", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace muster::rendezvous
