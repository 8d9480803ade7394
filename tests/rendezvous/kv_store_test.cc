#include "muster/store/kv_store.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/store/in_memory_store.h"

namespace muster::rendezvous {
namespace {

TEST(KvStoreTest, SetGetAddCompareSet) {
  store::KvStore kv;
  ASSERT_TRUE(kv.Set("j/1", "a", "x").ok());
  EXPECT_EQ(*kv.Get("j/1", "a"), "x");
  EXPECT_EQ(kv.Get("j/2", "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*kv.Add("j/1", "n", 5), 5);
  EXPECT_EQ(*kv.Add("j/1", "n", -2), 3);
  EXPECT_EQ(kv.Add("j/1", "a", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*kv.CompareSet("j/1", "c", "", "first"), "first");
  EXPECT_EQ(*kv.CompareSet("j/1", "c", "wrong", "second"), "first");
  EXPECT_EQ(*kv.CompareSet("j/1", "c", "first", "second"), "second");
  EXPECT_EQ(kv.NumKeys("j/1"), 3);
  EXPECT_TRUE(*kv.Delete("j/1", "c"));
  EXPECT_FALSE(*kv.Delete("j/1", "c"));
  EXPECT_FALSE(kv.MultiSet("j/1", {"a", "b"}, {"1"}).ok());
}

TEST(KvStoreTest, WaiterWakesOnSetAndNamespacesAreSeparate) {
  store::KvStore kv;
  std::vector<std::string> got;
  int calls = 0;
  auto id = kv.WaitFor("j/2", {"a", "b"},
                       [&](absl::StatusOr<std::vector<std::string>> v) {
                         ASSERT_TRUE(v.ok());
                         got = *v;
                         ++calls;
                       });
  EXPECT_NE(id, 0u);
  ASSERT_TRUE(kv.Set("j/1", "a", "other-round").ok());
  ASSERT_TRUE(kv.Set("j/2", "a", "1").ok());
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(kv.Set("j/2", "b", "2").ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(kv.PendingWaiters(), 0);
}

TEST(KvStoreTest, CancelNamesMissingKeysAndDropAborts) {
  store::KvStore kv;
  absl::Status why;
  auto id = kv.WaitFor(
      "j/1", {"present", "missing"},
      [&](absl::StatusOr<std::vector<std::string>> v) { why = v.status(); });
  ASSERT_TRUE(kv.Set("j/1", "present", "1").ok());
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

TEST(KvStoreTest, ADroppedRoundStaysClosedUntilItsJobIsForgotten) {
  store::KvStore kv;
  ASSERT_TRUE(kv.Set("j/1", "k", "v").ok());
  kv.DropNamespace("j/1");
  // Every op on it fails with ABORTED, naming it; nothing recreates it.
  absl::Status set = kv.Set("j/1", "late", "x");
  EXPECT_EQ(set.code(), absl::StatusCode::kAborted);
  EXPECT_NE(set.message().find("j/1"), std::string::npos) << set;
  EXPECT_EQ(kv.Add("j/1", "n", 1).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(kv.MultiSet("j/1", {"a"}, {"b"}).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(kv.Get("j/1", "k").status().code(), absl::StatusCode::kAborted);
  absl::Status waited;
  EXPECT_EQ(kv.WaitFor("j/1", {"k"},
                       [&](absl::StatusOr<std::vector<std::string>> v) {
                         waited = v.status();
                       }),
            0u);
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(kv.PendingWaiters(), 0);
  EXPECT_EQ(kv.NamespaceCount(), 0);
  // The next round's namespace is another one.
  EXPECT_TRUE(kv.Set("j/2", "k", "v").ok());
  // A job forgotten and run again under its name starts at round 1 afresh.
  kv.DropNamespacesWithPrefix("j/");
  EXPECT_TRUE(kv.Set("j/1", "k", "v").ok());
  EXPECT_EQ(*kv.Get("j/1", "k"), "v");
}

// Issue 35: every operation, the ones that write nothing included, answers
// ABORTED on a dropped namespace, before anything else it could answer
// (a value, "not an integer", "not found").
TEST(KvStoreTest, EveryOperationOnADroppedNamespaceIsAborted) {
  store::KvStore kv;
  ASSERT_TRUE(kv.Set("j/1", "k", "v").ok());
  ASSERT_TRUE(kv.Set("j/1", "text", "not a number").ok());
  kv.DropNamespace("j/1");
  EXPECT_TRUE(absl::IsAborted(kv.Delete("j/1", "k").status()));
  EXPECT_TRUE(absl::IsAborted(kv.Delete("j/1", "absent").status()));
  // A compare_set that would not swap reads a value: refused all the same.
  EXPECT_TRUE(absl::IsAborted(kv.CompareSet("j/1", "k", "x", "y").status()));
  EXPECT_TRUE(absl::IsAborted(kv.CompareSet("j/1", "k", "", "y").status()));
  EXPECT_TRUE(absl::IsAborted(kv.Add("j/1", "text", 1).status()));
  EXPECT_TRUE(absl::IsAborted(kv.MultiSet("j/1", {}, {})));
  EXPECT_TRUE(absl::IsAborted(kv.CountKeys("j/1").status()));
  EXPECT_EQ(kv.NumKeys("j/1"), 0);
  EXPECT_TRUE(absl::IsAborted(kv.Get("j/1", "absent").status()));
  // The async forms, without a Committer, answer the same at once.
  absl::StatusOr<bool> deleted = true;
  kv.DeleteAsync("j/1", "k", [&](absl::StatusOr<bool> v) { deleted = v; });
  EXPECT_TRUE(absl::IsAborted(deleted.status()));
  absl::StatusOr<std::string> swapped;
  kv.CompareSetAsync("j/1", "k", "x", "y",
                     [&](absl::StatusOr<std::string> v) { swapped = v; });
  EXPECT_TRUE(absl::IsAborted(swapped.status()));
  // Bad input stays refused as such.
  EXPECT_TRUE(absl::IsInvalidArgument(kv.MultiSet("j/1", {"a"}, {})));
  // A store's client sees the same (InMemoryStore on the namespace).
  auto shared = std::make_shared<store::KvStore>();
  store::InMemoryStore round(shared, "j/1");
  ASSERT_TRUE(round.Set("k", "v").ok());
  shared->DropNamespace("j/1");
  EXPECT_TRUE(absl::IsAborted(round.Delete("k").status()));
  EXPECT_TRUE(absl::IsAborted(round.NumKeys().status()));
  EXPECT_TRUE(absl::IsAborted(round.CompareSet("k", "x", "y").status()));
}

// The closed list keeps the newest kMaxClosedNamespaces: the oldest falls off
// (and opens again), the newest stay closed.
TEST(KvStoreTest, TheClosedListKeepsTheNewest) {
  store::KvStore kv;
  const size_t n = store::KvStore::kMaxClosedNamespaces + 2;
  for (size_t i = 1; i <= n; ++i) kv.DropNamespace(absl::StrCat("j/", i));
  EXPECT_TRUE(kv.Set("j/1", "k", "v").ok());
  EXPECT_TRUE(kv.Set("j/2", "k", "v").ok());
  EXPECT_TRUE(absl::IsAborted(kv.Set("j/3", "k", "v")));
  EXPECT_TRUE(absl::IsAborted(kv.Set(absl::StrCat("j/", n), "k", "v")));
}

TEST(InMemoryStoreTest, GetBlocksUntilAnotherThreadSets) {
  auto kv = std::make_shared<store::KvStore>();
  store::InMemoryStore a(kv, "ns"), b(kv, "ns");
  std::thread setter([&] {
    // Once the Get waits, so that the Set is what wakes it.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (kv->PendingWaiters() == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(kv->PendingWaiters(), 1);
    ASSERT_TRUE(b.Set("k", "v").ok());
  });
  auto v = a.Get("k", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
}

TEST(InMemoryStoreTest, GetTimesOutNamingKey) {
  store::InMemoryStore s;
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

namespace muster::rendezvous {
namespace {

using ::testing::HasSubstr;

// Issue 11: one job cannot exhaust a shared musterd. Each limit refuses the
// write with RESOURCE_EXHAUSTED naming the limit and its flag; nothing is
// written, and the namespace's accounting follows overwrites and deletes.
TEST(KvStoreTest, LimitsRefuseWritesNamingTheLimit) {
  store::KvStoreLimits limits;
  limits.max_key_bytes = 8;
  limits.max_value_bytes = 100;
  limits.max_namespace_keys = 3;
  limits.max_namespace_bytes = 250;
  store::KvStore kv(limits);
  absl::Status s = kv.Set("j/1", "a-very-long-key", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--store-max-key-bytes"));
  s = kv.Set("j/1", "k", std::string(101, 'v'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("limit of 100 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("--store-max-value-bytes"));
  EXPECT_EQ(kv.NumKeys("j/1"), 0);

  ASSERT_TRUE(kv.Set("j/1", "a", std::string(100, 'a')).ok());  // 101 bytes
  ASSERT_TRUE(kv.Set("j/1", "b", std::string(100, 'b')).ok());  // 202
  s = kv.Set("j/1", "c", std::string(100, 'c'));                // 303 > 250
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("quota of 250 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("--store-max-bytes"));
  EXPECT_FALSE(kv.Get("j/1", "c").ok()) << "nothing is written";
  // Overwriting with a smaller value frees room; a delete frees its bytes.
  ASSERT_TRUE(kv.Set("j/1", "b", "1").ok());                    // 101 + 2
  ASSERT_TRUE(kv.Set("j/1", "c", std::string(100, 'c')).ok());  // 204
  s = kv.Set("j/1", "d", "1");                                  // a 4th key
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("quota of 3 (musterd --store-max-keys)"));
  EXPECT_TRUE(*kv.Delete("j/1", "c"));
  EXPECT_TRUE(kv.Set("j/1", "d", "1").ok());
  // Add, CompareSet and MultiSet (all or nothing) count too.
  EXPECT_EQ(kv.Add("j/1", "e", 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.CompareSet("j/1", "e", "", "1").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.MultiSet("j/1", {"d", "e"}, {"2", "3"}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*kv.Get("j/1", "d"), "1") << "MultiSet wrote part of its batch";
  // Another job's namespace has its own quota.
  EXPECT_TRUE(kv.Set("k/1", "x", std::string(100, 'x')).ok());
}

}  // namespace
}  // namespace muster::rendezvous
