// KvStore's replicated write path (issue 25): with a Committer set, an async
// write applies and is acknowledged only once committed; readers never see a
// write in flight; writes of one key see each other at once; a failed commit
// applies nothing; a namespace dropped meanwhile is not brought back; and
// acknowledgements keep the order of submission. The Committer here is a
// fake the test completes by hand (the real one, on etcd, is exercised by
// tests/e2e/replica_e2e_test.cc).
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/store/kv_store.h"

namespace muster::rendezvous {
namespace {

using ::testing::ElementsAre;

class FakeCommitter : public store::KvStore::Committer {
 public:
  void Commit(std::vector<Write> writes,
              absl::AnyInvocable<void(absl::Status)> done) override {
    batches.push_back({std::move(writes), std::move(done)});
  }
  void CommitClose(std::string ns, std::string forget) override {
    closes.push_back(ns);
    forgotten.push_back(std::move(forget));
    // In the queue's order (its transaction goes after the batches before).
    batches.emplace_back(
        std::vector<Write>(),
        absl::AnyInvocable<void(absl::Status)>([](absl::Status) {}));
  }
  void CommitDrop(std::string ns_prefix) override {
    drops.push_back(std::move(ns_prefix));
  }
  // Completes the oldest batch.
  void CompleteNext(absl::Status status = absl::OkStatus()) {
    ASSERT_FALSE(batches.empty());
    auto batch = std::move(batches.front());
    batches.pop_front();
    batch.second(std::move(status));
  }
  std::deque<
      std::pair<std::vector<Write>, absl::AnyInvocable<void(absl::Status)>>>
      batches;
  std::vector<std::string> drops;
  std::vector<std::string> closes;     // CommitClose's namespaces
  std::vector<std::string> forgotten;  // and the records they drop
};

class KvStoreCommitterTest : public ::testing::Test {
 protected:
  void SetUp() override { store_.SetCommitter(&committer_); }
  store::KvStore store_;
  FakeCommitter committer_;
};

TEST_F(KvStoreCommitterTest, AWriteIsSeenAndAcknowledgedOnlyOnceCommitted) {
  absl::Status acked = absl::UnknownError("not yet");
  store_.SetAsync("j/1", "k", "v", [&](absl::Status s) { acked = s; });
  EXPECT_TRUE(absl::IsUnknown(acked));
  EXPECT_TRUE(absl::IsNotFound(store_.Get("j/1", "k").status()));
  ASSERT_EQ(committer_.batches.size(), 1u);
  EXPECT_EQ(committer_.batches[0].first[0].ns, "j/1");
  EXPECT_EQ(committer_.batches[0].first[0].value, "v");
  committer_.CompleteNext();
  EXPECT_TRUE(acked.ok());
  EXPECT_EQ(*store_.Get("j/1", "k"), "v");
}

TEST_F(KvStoreCommitterTest, WaitersWakeOnCommitNotBefore) {
  std::vector<std::string> got;
  store_.WaitFor("j/1", {"a"}, [&](absl::StatusOr<std::vector<std::string>> v) {
    if (v.ok()) got = *v;
  });
  store_.SetAsync("j/1", "a", "1", [](absl::Status) {});
  EXPECT_TRUE(got.empty());
  committer_.CompleteNext();
  EXPECT_THAT(got, ElementsAre("1"));
}

TEST_F(KvStoreCommitterTest, AddsCountFromTheAddsInFlight) {
  std::vector<int64_t> results;
  for (int i = 0; i < 3; ++i) {
    store_.AddAsync("j/1", "n", 1, [&](absl::StatusOr<int64_t> v) {
      results.push_back(v.ok() ? *v : -1);
    });
  }
  EXPECT_TRUE(results.empty());
  EXPECT_TRUE(absl::IsNotFound(store_.Get("j/1", "n").status()));
  while (!committer_.batches.empty()) committer_.CompleteNext();
  // Acknowledged in the order they were made, with their own results.
  EXPECT_THAT(results, ElementsAre(1, 2, 3));
  EXPECT_EQ(*store_.Get("j/1", "n"), "3");
}

TEST_F(KvStoreCommitterTest, AFailedCommitAppliesNothingAndSaysWhy) {
  absl::StatusOr<int64_t> result = 0;
  store_.AddAsync("j/1", "n", 5,
                  [&](absl::StatusOr<int64_t> v) { result = std::move(v); });
  committer_.CompleteNext(absl::UnavailableError("deposed"));
  EXPECT_TRUE(absl::IsUnavailable(result.status()));
  EXPECT_TRUE(absl::IsNotFound(store_.Get("j/1", "n").status()));
  // The key's next write starts from what is committed again.
  store_.AddAsync("j/1", "n", 1,
                  [&](absl::StatusOr<int64_t> v) { result = std::move(v); });
  committer_.CompleteNext();
  EXPECT_EQ(*result, 1);
}

TEST_F(KvStoreCommitterTest, CompareSetAndDeleteSeeTheWritesInFlight) {
  store_.SetAsync("j/1", "k", "a", [](absl::Status) {});
  absl::StatusOr<std::string> swapped;
  store_.CompareSetAsync("j/1", "k", "a", "b",
                         [&](absl::StatusOr<std::string> v) { swapped = v; });
  absl::StatusOr<bool> deleted = false;
  store_.DeleteAsync("j/1", "k", [&](absl::StatusOr<bool> v) { deleted = v; });
  while (!committer_.batches.empty()) committer_.CompleteNext();
  EXPECT_EQ(*swapped, "b");
  EXPECT_TRUE(*deleted);
  EXPECT_TRUE(absl::IsNotFound(store_.Get("j/1", "k").status()));
}

TEST_F(KvStoreCommitterTest,
       ACompareSetThatDoesNotSwapWaitsForTheWritesBefore) {
  store_.SetAsync("j/1", "k", "a", [](absl::Status) {});
  absl::StatusOr<std::string> answer = absl::UnknownError("not yet");
  store_.CompareSetAsync("j/1", "k", "x", "y",
                         [&](absl::StatusOr<std::string> v) { answer = v; });
  EXPECT_TRUE(absl::IsUnknown(answer.status()));  // "a" is not committed yet
  committer_.CompleteNext();
  committer_.CompleteNext();
  EXPECT_EQ(*answer, "a");
}

TEST_F(KvStoreCommitterTest,
       ADroppedNamespaceIsNotBroughtBackByWritesInFlight) {
  store_.SetAsync("j/1", "k", "v", [](absl::Status) {});
  store_.DropNamespace("j/1");
  EXPECT_THAT(committer_.closes, ElementsAre("j/1"));
  committer_.CompleteNext();
  EXPECT_TRUE(absl::IsAborted(store_.Get("j/1", "k").status()));
  EXPECT_EQ(store_.NumKeys("j/1"), 0);
  // A whole job's rounds: one range drop in the replicas' log (with the
  // records of its closed rounds).
  store_.DropNamespacesWithPrefix("j/");
  EXPECT_THAT(committer_.drops, ElementsAre("j/"));
}

// Issue 35: after a drop nothing answers from the namespace, not even an
// operation that writes nothing (a compare_set that does not swap, a delete
// of an absent key), and nothing is handed to the committer for it.
TEST_F(KvStoreCommitterTest, EveryOperationAfterTheDropIsAborted) {
  store_.SetAsync("j/1", "k", "in flight", [](absl::Status) {});
  store_.DropNamespace("j/1");
  const size_t queued = committer_.batches.size();
  std::vector<absl::Status> answers;
  auto keep = [&](auto v) { answers.push_back(v.status()); };
  store_.CompareSetAsync("j/1", "k", "x", "y", keep);
  store_.CompareSetAsync("j/1", "k", "in flight", "y", keep);
  store_.DeleteAsync("j/1", "k", keep);
  store_.DeleteAsync("j/1", "absent", keep);
  store_.AddAsync("j/1", "k", 1, keep);  // "in flight" is not an integer
  store_.MultiSetAsync("j/1", {}, {},
                       [&](absl::Status s) { answers.push_back(s); });
  store_.SetAsync("j/1", "k", "v",
                  [&](absl::Status s) { answers.push_back(s); });
  ASSERT_EQ(answers.size(), 7u);
  for (const absl::Status& s : answers) {
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_THAT(s.message(), ::testing::HasSubstr("j/1"));
  }
  EXPECT_EQ(committer_.batches.size(), queued);
  EXPECT_TRUE(absl::IsAborted(store_.CountKeys("j/1").status()));
  // The value in flight at the drop is never read, nor applied.
  while (!committer_.batches.empty()) committer_.CompleteNext();
  EXPECT_TRUE(absl::IsAborted(store_.Get("j/1", "k").status()));
}

// Writes in flight at the drop are answered, each with its commit's status:
// the committer commits them before the drop, so they took effect before it
// on every replica (and a next leader that never got the drop holds them).
// A commit that failed says so (UNAVAILABLE: its outcome is unknown).
TEST_F(KvStoreCommitterTest, WritesInFlightAtTheDropAreAnswered) {
  absl::Status set = absl::UnknownError("not yet");
  absl::StatusOr<int64_t> added = absl::UnknownError("not yet");
  absl::StatusOr<std::string> kept = absl::UnknownError("not yet");
  absl::StatusOr<bool> deleted = absl::UnknownError("not yet");
  absl::Status lost = absl::UnknownError("not yet");
  store_.SetAsync("j/1", "k", "a", [&](absl::Status s) { set = s; });
  store_.AddAsync("j/1", "n", 2, [&](absl::StatusOr<int64_t> v) { added = v; });
  store_.CompareSetAsync("j/1", "k", "x", "y",
                         [&](absl::StatusOr<std::string> v) { kept = v; });
  store_.DeleteAsync("j/1", "k", [&](absl::StatusOr<bool> v) { deleted = v; });
  store_.SetAsync("j/1", "m", "b", [&](absl::Status s) { lost = s; });
  store_.DropNamespace("j/1");
  ASSERT_EQ(committer_.batches.size(), 6u);  // 5 batches, then the close
  for (int i = 0; i < 4; ++i) committer_.CompleteNext();
  committer_.CompleteNext(absl::UnavailableError("etcd away"));
  EXPECT_TRUE(set.ok()) << set;
  EXPECT_EQ(*added, 2);
  EXPECT_EQ(*kept, "a");  // no swap: the value before it, committed
  EXPECT_TRUE(*deleted);
  EXPECT_TRUE(absl::IsUnavailable(lost)) << lost;
  // Not applied: the namespace is gone here.
  EXPECT_EQ(store_.NumKeys("j/1"), 0);
  EXPECT_TRUE(absl::IsAborted(store_.Get("j/1", "n").status()));
}

// The records of closed namespaces are bounded as the store's list is: the
// close that pushes the oldest off the list drops its record in etcd.
TEST_F(KvStoreCommitterTest, TheOldestClosedRecordGoesWithTheNewestClose) {
  const size_t n = store::KvStore::kMaxClosedNamespaces + 1;
  for (size_t i = 1; i <= n; ++i) store_.DropNamespace(absl::StrCat("j/", i));
  ASSERT_EQ(committer_.forgotten.size(), n);
  EXPECT_EQ(committer_.forgotten[n - 2], "");
  EXPECT_EQ(committer_.forgotten[n - 1], "j/1");
  // Closing one already closed records nothing new to forget.
  store_.DropNamespace(absl::StrCat("j/", n));
  EXPECT_EQ(committer_.forgotten.back(), "");
  // A forgotten job's records go with its keys, in one range.
  store_.DropNamespacesWithPrefix("j/");
  EXPECT_THAT(committer_.drops, ElementsAre("j/"));
  EXPECT_TRUE(store_.Get("j/2", "k").status().code() ==
              absl::StatusCode::kNotFound);
}

TEST_F(KvStoreCommitterTest, QuotasAreCheckedBeforeAnythingIsCommitted) {
  store::KvStore small(store::KvStoreLimits{.max_key_bytes = 4});
  small.SetCommitter(&committer_);
  absl::Status s;
  small.SetAsync("j/1", "too-long", "v", [&](absl::Status r) { s = r; });
  EXPECT_TRUE(absl::IsResourceExhausted(s));
  EXPECT_TRUE(committer_.batches.empty());
}

TEST(KvStoreWithoutCommitterTest, AsyncWritesApplyAtOnce) {
  store::KvStore store;
  absl::StatusOr<int64_t> v;
  store.AddAsync("j/1", "n", 2, [&](absl::StatusOr<int64_t> r) { v = r; });
  EXPECT_EQ(*v, 2);
  EXPECT_EQ(*store.Get("j/1", "n"), "2");
}

}  // namespace
}  // namespace muster::rendezvous
