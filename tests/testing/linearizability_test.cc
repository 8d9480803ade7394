#include "tests/testing/linearizability.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Kind = KvOp::Kind;
using Outcome = KvOp::Outcome;
using Verdict = LinearizabilityResult::Verdict;

// Times in milliseconds from an arbitrary origin.
absl::Time T(int64_t ms) { return absl::UnixEpoch() + absl::Milliseconds(ms); }

KvOp Op(int client, Kind kind, std::string key, int64_t from, int64_t to) {
  KvOp op;
  op.client = client;
  op.kind = kind;
  op.key = std::move(key);
  op.outcome = Outcome::kOk;
  op.invoked = T(from);
  op.returned = T(to);
  return op;
}

KvOp Set(int client, std::string key, std::string value, int64_t from,
         int64_t to) {
  KvOp op = Op(client, Kind::kSet, std::move(key), from, to);
  op.value = std::move(value);
  return op;
}

// value: nullopt for a get that found the key absent.
KvOp Get(int client, std::string key, std::optional<std::string> value,
         int64_t from, int64_t to) {
  KvOp op = Op(client, Kind::kGet, std::move(key), from, to);
  op.found = value.has_value();
  op.result = value.value_or("");
  return op;
}

KvOp Add(int client, std::string key, int64_t delta, int64_t result,
         int64_t from, int64_t to) {
  KvOp op = Op(client, Kind::kAdd, std::move(key), from, to);
  op.delta = delta;
  op.result = absl::StrCat(result);
  return op;
}

KvOp Cas(int client, std::string key, std::string expected, std::string desired,
         std::string result, int64_t from, int64_t to) {
  KvOp op = Op(client, Kind::kCompareSet, std::move(key), from, to);
  op.expected = std::move(expected);
  op.value = std::move(desired);
  op.result = std::move(result);
  return op;
}

KvOp Del(int client, std::string key, bool existed, int64_t from, int64_t to) {
  KvOp op = Op(client, Kind::kDelete, std::move(key), from, to);
  op.found = existed;
  return op;
}

// The op sent but never answered: its result fields are ignored.
KvOp Unknown(KvOp op) {
  op.outcome = Outcome::kUnknown;
  op.returned = absl::InfiniteFuture();
  return op;
}

KvOp NotApplied(KvOp op) {
  op.outcome = Outcome::kNotApplied;
  return op;
}

LinearizabilityResult Check(const std::vector<KvOp>& history) {
  return CheckLinearizable(history, absl::Seconds(10));
}

bool Linearizable(const std::vector<KvOp>& history) {
  LinearizabilityResult r = Check(history);
  EXPECT_NE(r.verdict, Verdict::kTimedOut) << r.explanation;
  return r.verdict == Verdict::kLinearizable;
}

TEST(LinearizabilityTest, EmptyHistoryIsLinearizable) {
  LinearizabilityResult r = Check({});
  EXPECT_EQ(r.verdict, Verdict::kLinearizable);
  EXPECT_EQ(r.keys, 0);
  EXPECT_EQ(r.ops, 0);
}

TEST(LinearizabilityTest, SequentialHistoryFollowsTheModel) {
  EXPECT_TRUE(Linearizable({
      Get(1, "k", std::nullopt, 0, 1),
      Set(1, "k", "a", 2, 3),
      Get(2, "k", "a", 4, 5),
      Del(1, "k", true, 6, 7),
      Get(2, "k", std::nullopt, 8, 9),
      Del(2, "k", false, 10, 11),
  }));
  // Keys start absent.
  EXPECT_FALSE(Linearizable({Del(1, "k", true, 0, 1)}));
  EXPECT_FALSE(Linearizable({Get(1, "k", "", 0, 1)}));
}

TEST(LinearizabilityTest, StaleReadAfterAcknowledgedWriteIsNotLinearizable) {
  std::vector<KvOp> history = {
      Set(1, "addr", "10.0.0.1", 0, 10),
      Set(1, "addr", "10.0.0.2", 20, 30),
      // Invoked after the second set returned: it must see 10.0.0.2.
      Get(2, "addr", "10.0.0.1", 40, 50),
  };
  LinearizabilityResult r = Check(history);
  EXPECT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(r.key, "addr");
  EXPECT_EQ(r.keys, 1);
  EXPECT_EQ(r.ops, 3);
  EXPECT_THAT(r.explanation, HasSubstr("key \"addr\": not linearizable"));
  EXPECT_THAT(r.explanation, HasSubstr("#2 client 2 get(\"addr\") -> "
                                       "\"10.0.0.1\" [+40.000ms, +50.000ms]"));
  // Both sets fit; the read does not.
  EXPECT_THAT(r.explanation,
              HasSubstr("longest linearizable prefix found (2 of 3 ops, 0 of "
                        "them unanswered): #0 #1\n  leaving the key at "
                        "\"10.0.0.2\""));
  EXPECT_THAT(r.explanation,
              HasSubstr("then #2 must take effect by +50.000ms"));

  // The same read overlapping the second set is fine: it took effect first.
  history[2] = Get(2, "addr", "10.0.0.1", 25, 50);
  EXPECT_TRUE(Linearizable(history));
}

TEST(LinearizabilityTest, ConcurrentWritesMayLandInEitherOrder) {
  const std::vector<KvOp> writes = {Set(1, "k", "a", 0, 10),
                                    Set(2, "k", "b", 0, 10)};
  for (const char* last : {"a", "b"}) {
    std::vector<KvOp> history = writes;
    history.push_back(Get(3, "k", last, 11, 12));
    history.push_back(Get(4, "k", last, 13, 14));
    EXPECT_TRUE(Linearizable(history)) << last;
  }
  // Reads during the writes may see both, in the order the writes land...
  std::vector<KvOp> during = writes;
  during.push_back(Get(3, "k", "b", 1, 2));
  during.push_back(Get(3, "k", "a", 3, 4));
  during.push_back(Get(4, "k", "a", 11, 12));
  EXPECT_TRUE(Linearizable(during));
  // ...but once both returned, the value does not flip back.
  std::vector<KvOp> flip = writes;
  flip.push_back(Get(3, "k", "a", 11, 12));
  flip.push_back(Get(4, "k", "b", 13, 14));
  EXPECT_FALSE(Linearizable(flip));
  // Nor do two reads during the writes see them in opposite orders when
  // they follow each other in real time after a common value.
  std::vector<KvOp> opposite = writes;
  opposite.push_back(Get(3, "k", "a", 1, 2));
  opposite.push_back(Get(3, "k", "b", 3, 4));
  opposite.push_back(Get(4, "k", "a", 5, 6));
  EXPECT_FALSE(Linearizable(opposite));
}

TEST(LinearizabilityTest, OpsTouchingAtAnInstantAreConcurrent) {
  // The set returns at 10 and the get is invoked at 10: either may be first.
  EXPECT_TRUE(Linearizable(
      {Set(1, "k", "a", 0, 10), Get(2, "k", std::nullopt, 10, 20)}));
  EXPECT_FALSE(Linearizable(
      {Set(1, "k", "a", 0, 10), Get(2, "k", std::nullopt, 11, 20)}));
}

TEST(LinearizabilityTest, AcknowledgedWriteLostAcrossFailover) {
  // Three clients count arrivals; the leader dies at ~100ms: the adds in
  // flight get no answer, a new leader answers from 300ms on.
  std::vector<KvOp> history = {
      Add(1, "arrived", 1, 1, 0, 5),
      Add(2, "arrived", 1, 2, 10, 15),
      Add(3, "arrived", 1, 3, 20, 25),
      Unknown(Add(1, "arrived", 1, 0, 95, 0)),
      Unknown(Add(2, "arrived", 1, 0, 98, 0)),
  };
  // The new leader may or may not have got the unknown adds...
  for (int64_t seen : {3, 4, 5}) {
    std::vector<KvOp> h = history;
    h.push_back(Add(3, "arrived", 0, seen, 300, 305));
    EXPECT_TRUE(Linearizable(h)) << seen;
  }
  // ...but it lost an acknowledged one when it reads 2.
  std::vector<KvOp> lost = history;
  lost.push_back(Add(3, "arrived", 0, 2, 300, 305));
  LinearizabilityResult r = Check(lost);
  EXPECT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(r.key, "arrived");
  EXPECT_THAT(r.explanation, HasSubstr("add(\"arrived\", 1) -> ? (no answer) "
                                       "[+95.000ms, ...]"));

  // A store address set before the failover and read back absent after it.
  EXPECT_FALSE(Linearizable({
      Set(1, "master", "10.0.0.1:29500", 0, 5),
      Unknown(Set(2, "master", "10.0.0.2:29500", 90, 0)),
      Get(3, "master", std::nullopt, 300, 305),
  }));
  // Read back as the unknown write: it took effect.
  EXPECT_TRUE(Linearizable({
      Set(1, "master", "10.0.0.1:29500", 0, 5),
      Unknown(Set(2, "master", "10.0.0.2:29500", 90, 0)),
      Get(3, "master", "10.0.0.2:29500", 300, 305),
      Get(3, "master", "10.0.0.2:29500", 310, 315),
  }));
}

TEST(LinearizabilityTest, UnknownAddMayApplyLateOrNever) {
  const std::vector<KvOp> base = {
      Add(1, "n", 1, 1, 0, 1),
      Unknown(Add(2, "n", 10, 0, 2, 0)),
  };
  // Never applied.
  std::vector<KvOp> never = base;
  never.push_back(Add(1, "n", 1, 2, 3, 4));
  never.push_back(Get(3, "n", "2", 100, 101));
  EXPECT_TRUE(Linearizable(never));
  // Applied, late: after the first read, before the second.
  std::vector<KvOp> late = base;
  late.push_back(Get(3, "n", "1", 3, 4));
  late.push_back(Get(3, "n", "11", 100, 101));
  late.push_back(Add(1, "n", 1, 12, 200, 201));
  EXPECT_TRUE(Linearizable(late));
  // Applied, then unapplied: no.
  std::vector<KvOp> undone = base;
  undone.push_back(Get(3, "n", "11", 3, 4));
  undone.push_back(Get(3, "n", "1", 100, 101));
  EXPECT_FALSE(Linearizable(undone));
  // Applied twice: no.
  std::vector<KvOp> twice = base;
  twice.push_back(Get(3, "n", "21", 100, 101));
  EXPECT_FALSE(Linearizable(twice));
  // It cannot take effect before it was invoked.
  EXPECT_FALSE(Linearizable({
      Add(1, "n", 1, 1, 0, 1),
      Get(3, "n", "11", 3, 4),
      Unknown(Add(2, "n", 10, 0, 5, 0)),
  }));
}

TEST(LinearizabilityTest, NotAppliedOpsAreDropped) {
  // An ABORTED set on a dropped namespace wrote nothing...
  EXPECT_TRUE(Linearizable({
      Set(1, "k", "a", 0, 1),
      NotApplied(Set(2, "k", "b", 2, 3)),
      Get(3, "k", "a", 4, 5),
  }));
  // ...so reading its value is reading a value never written.
  LinearizabilityResult r = Check({
      Set(1, "k", "a", 0, 1),
      NotApplied(Set(2, "k", "b", 2, 3)),
      Get(3, "k", "b", 4, 5),
  });
  EXPECT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(r.ops, 2);
}

TEST(LinearizabilityTest, ReadOfAValueNeverWritten) {
  LinearizabilityResult r = Check({
      Set(1, "rank0", "host-a", 0, 10),
      Get(2, "rank0", "host-z", 5, 15),
  });
  EXPECT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_THAT(r.explanation, HasSubstr("\"host-z\""));
  // An unknown set of that value explains it, if invoked before the read
  // returned.
  EXPECT_TRUE(Linearizable({
      Set(1, "rank0", "host-a", 0, 10),
      Unknown(Set(3, "rank0", "host-z", 14, 0)),
      Get(2, "rank0", "host-z", 5, 15),
  }));
  EXPECT_FALSE(Linearizable({
      Set(1, "rank0", "host-a", 0, 10),
      Unknown(Set(3, "rank0", "host-z", 16, 0)),
      Get(2, "rank0", "host-z", 5, 15),
  }));
}

TEST(LinearizabilityTest, CompareSetChain) {
  EXPECT_TRUE(Linearizable({
      // Absent matches an empty expected: swaps.
      Cas(1, "leader", "", "a", "a", 0, 1),
      // Equal: swaps and answers desired.
      Cas(2, "leader", "a", "b", "b", 2, 3),
      // Not equal: answers the current value and changes nothing.
      Cas(3, "leader", "a", "c", "b", 4, 5),
      Cas(1, "leader", "", "d", "b", 6, 7),
      Get(2, "leader", "b", 8, 9),
      Del(1, "leader", true, 10, 11),
      // Absent and expected not empty: answers "" and changes nothing.
      Cas(2, "leader", "b", "e", "", 12, 13),
      Get(2, "leader", std::nullopt, 14, 15),
      // A present "" matches an empty expected.
      Set(3, "leader", "", 16, 17),
      Cas(3, "leader", "", "f", "f", 18, 19),
  }));
  // A non-swapping compare_set on an absent key must not have created it.
  EXPECT_FALSE(Linearizable({
      Cas(2, "leader", "b", "e", "", 0, 1),
      Get(2, "leader", "", 2, 3),
  }));
  // The answer of a swap is desired, never the old value.
  EXPECT_FALSE(Linearizable({
      Set(1, "leader", "a", 0, 1),
      Cas(2, "leader", "a", "b", "a", 2, 3),
  }));
}

TEST(LinearizabilityTest, ConcurrentCompareSetsElectOneWinner) {
  // Both try to claim the key at once: one wins, the other sees the winner.
  EXPECT_TRUE(Linearizable({
      Cas(1, "owner", "", "n1", "n1", 0, 10),
      Cas(2, "owner", "", "n2", "n1", 0, 10),
      Get(3, "owner", "n1", 20, 21),
  }));
  // Both winning is a split brain.
  LinearizabilityResult r = Check({
      Cas(1, "owner", "", "n1", "n1", 0, 10),
      Cas(2, "owner", "", "n2", "n2", 0, 10),
  });
  EXPECT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_THAT(r.explanation, HasSubstr("longest linearizable prefix found (1 "
                                       "of 2 ops, 0 of them unanswered)"));
  // A chain of handovers, each expecting its predecessor, with one unknown
  // link that did apply (the next link saw its value).
  EXPECT_TRUE(Linearizable({
      Cas(1, "owner", "", "1", "1", 0, 1),
      Unknown(Cas(2, "owner", "1", "2", "", 2, 0)),
      Cas(3, "owner", "2", "3", "3", 10, 11),
      Cas(1, "owner", "1", "x", "3", 12, 13),
  }));
}

TEST(LinearizabilityTest, AddFollowsKvStore) {
  // Absent counts 0; so does "".
  EXPECT_TRUE(Linearizable({Add(1, "a", 5, 5, 0, 1), Get(1, "a", "5", 2, 3)}));
  EXPECT_TRUE(Linearizable({Set(1, "a", "", 0, 1), Add(1, "a", -2, -2, 2, 3)}));
  // A value that is not an integer refuses the add: no kOk answer.
  EXPECT_FALSE(
      Linearizable({Set(1, "a", "abc", 0, 1), Add(1, "a", 1, 1, 2, 3)}));
  // ...and an unknown add there took no effect.
  EXPECT_TRUE(
      Linearizable({Set(1, "a", "abc", 0, 1), Unknown(Add(1, "a", 1, 0, 2, 0)),
                    Get(2, "a", "abc", 10, 11)}));
  // A set integer counts; the add stores the decimal text of the sum.
  EXPECT_TRUE(Linearizable({Set(1, "a", "+7", 0, 1), Add(1, "a", 1, 8, 2, 3),
                            Get(1, "a", "8", 4, 5)}));
  EXPECT_FALSE(Linearizable({Set(1, "a", "7", 0, 1), Add(1, "a", 1, 8, 2, 3),
                             Get(1, "a", "08", 4, 5)}));
}

TEST(LinearizabilityTest, KeysAreCheckedSeparatelyAndTheBadOneNamed) {
  std::vector<KvOp> history;
  for (int i = 0; i < 50; ++i) {
    history.push_back(Set(1, "good", absl::StrCat(i), 10 * i, 10 * i + 5));
    history.push_back(Get(2, "good", absl::StrCat(i), 10 * i + 6, 10 * i + 7));
  }
  history.push_back(Set(3, "bad/key", "v1", 0, 1));
  history.push_back(Set(3, "bad/key", "v2", 2, 3));
  history.push_back(Get(4, "bad/key", "v1", 4, 5));
  LinearizabilityResult r = Check(history);
  EXPECT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(r.key, "bad/key");
  EXPECT_THAT(r.explanation, HasSubstr("key \"bad/key\""));
  EXPECT_THAT(r.explanation, Not(HasSubstr("\"good\"")));
  history.pop_back();
  r = Check(history);
  EXPECT_EQ(r.verdict, Verdict::kLinearizable);
  EXPECT_EQ(r.keys, 2);
  EXPECT_EQ(r.ops, 102);
}

TEST(LinearizabilityTest, DescribeOp) {
  EXPECT_EQ(DescribeOp(Cas(7, "k", "a", "b\n", "b\n", 1, 2), T(0)),
            "client 7 compare_set(\"k\", expected \"a\", desired \"b\\n\") -> "
            "\"b\\n\" [+1.000ms, +2.000ms]");
  EXPECT_EQ(DescribeOp(Get(1, "k", std::nullopt, 0, 1)),
            "client 1 get(\"k\") -> absent [00:00:00.000000, 00:00:00.001000]");
  EXPECT_EQ(DescribeOp(NotApplied(Del(2, "k", false, 0, 1)), T(0)),
            "client 2 delete(\"k\") -> not applied [+0.000ms, +1.000ms]");
}

// ---------------------------------------------------------------------------
// Histories made by running a store: each op takes effect at a random
// instant in its interval (unknown ops at a random instant after invocation,
// or never), so the history is linearizable by construction.

// The Store's semantics once more, on strings, for the generators and the
// brute-force checker below.
struct Model {
  // Applies op; false when the store would refuse it (Add on a non-integer).
  // Fills the answer fields of `op` when `answer`.
  static bool Apply(std::optional<std::string>& state, KvOp& op, bool answer) {
    switch (op.kind) {
      case Kind::kSet:
        state = op.value;
        return true;
      case Kind::kGet:
        if (answer) {
          op.found = state.has_value();
          op.result = state.value_or("");
        }
        return true;
      case Kind::kAdd: {
        int64_t current = 0;
        if (state.has_value() && !state->empty() &&
            !absl::SimpleAtoi(*state, &current)) {
          return false;
        }
        state = absl::StrCat(current + op.delta);
        if (answer) op.result = *state;
        return true;
      }
      case Kind::kCompareSet: {
        const bool swap =
            state.has_value() ? *state == op.expected : op.expected.empty();
        if (swap) state = op.value;
        if (answer) op.result = state.value_or("");
        return true;
      }
      case Kind::kDelete:
        if (answer) op.found = state.has_value();
        state.reset();
        return true;
    }
    return false;
  }

  // Whether op, applied to state, gives the answer it recorded.
  static bool Matches(std::optional<std::string>& state, const KvOp& op) {
    KvOp copy = op;
    if (!Apply(state, copy, true)) return false;
    if (op.outcome == Outcome::kUnknown) return true;
    switch (op.kind) {
      case Kind::kSet:
        return true;
      case Kind::kGet:
        return copy.found == op.found &&
               (!op.found || copy.result == op.result);
      case Kind::kAdd: {
        int64_t want = 0;
        return absl::SimpleAtoi(op.result, &want) &&
               absl::StrCat(want) == copy.result;
      }
      case Kind::kCompareSet:
        return copy.result == op.result;
      case Kind::kDelete:
        return copy.found == op.found;
    }
    return false;
  }
};

struct GenOptions {
  int clients = 4;
  int ops = 10;
  std::vector<std::string> keys = {"k"};
  std::vector<std::string> values = {"", "a", "b", "1", "2"};
  int64_t max_gap_us = 3000;
  int64_t max_duration_us = 8000;
  double unknown = 0.1;
  // As a nemesis test's clients do: every value written is new, "counter*"
  // keys only see add(1) and get, the others set, get, compare_set from a
  // recently written value, and now and then delete.
  bool nemesis_like = false;
};

// Each client issues ops one after another; an op's effect lands at a random
// point of its interval and the answers come from running them in that
// order.
std::vector<KvOp> Generate(std::mt19937_64& rng, const GenOptions& o) {
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto pick = [&](const std::vector<std::string>& from) {
    return from[uniform(0, static_cast<int64_t>(from.size()) - 1)];
  };
  std::vector<int64_t> clock(o.clients, 0);
  std::vector<KvOp> history;
  std::vector<std::pair<int64_t, int>> effects;  // (instant, op), us
  std::map<std::string, std::vector<std::string>> written;
  for (int i = 0; i < o.ops; ++i) {
    const int client = static_cast<int>(uniform(0, o.clients - 1));
    KvOp op;
    op.client = client;
    op.kind = static_cast<Kind>(uniform(0, 4));
    op.key = pick(o.keys);
    op.value = pick(o.values);
    op.expected = pick(o.values);
    op.delta = uniform(-2, 3);
    if (o.nemesis_like) {
      const int64_t dice = uniform(0, 99);
      op.delta = 1;
      if (op.key.rfind("counter", 0) == 0) {
        op.kind = dice < 60 ? Kind::kAdd : Kind::kGet;
      } else {
        op.kind = dice < 30   ? Kind::kSet
                  : dice < 70 ? Kind::kGet
                  : dice < 95 ? Kind::kCompareSet
                              : Kind::kDelete;
        op.value = absl::StrCat("c", client, "-", i);
        std::vector<std::string>& seen = written[op.key];
        op.expected =
            seen.empty() || dice % 5 == 0
                ? ""
                : seen[seen.size() - 1 -
                       uniform(0, std::min<int64_t>(2, seen.size() - 1))];
        if (op.kind == Kind::kSet || op.kind == Kind::kCompareSet) {
          seen.push_back(op.value);
        }
      }
    }
    const int64_t from = clock[client] + uniform(0, o.max_gap_us);
    const int64_t to = from + uniform(0, o.max_duration_us);
    op.invoked = absl::UnixEpoch() + absl::Microseconds(from);
    op.returned = absl::UnixEpoch() + absl::Microseconds(to);
    op.outcome = Outcome::kOk;
    clock[client] = to;
    if (std::bernoulli_distribution(o.unknown)(rng)) {
      op.outcome = Outcome::kUnknown;
      op.returned = absl::InfiniteFuture();
      // Taking effect late or never; the client gives up on it and goes on.
      if (uniform(0, 1) == 0) {
        effects.emplace_back(from + uniform(0, 4 * o.max_duration_us),
                             static_cast<int>(history.size()));
      }
    } else {
      effects.emplace_back(uniform(from, to), static_cast<int>(history.size()));
    }
    history.push_back(op);
  }
  std::stable_sort(effects.begin(), effects.end());
  std::map<std::string, std::optional<std::string>> store;
  for (const auto& [at, i] : effects) {
    KvOp& op = history[i];
    if (!Model::Apply(store[op.key], op, op.outcome == Outcome::kOk)) {
      if (op.outcome == Outcome::kOk) op.outcome = Outcome::kNotApplied;
    }
  }
  return history;
}

// Breaks one answer of a history (it may by chance stay linearizable).
void Corrupt(std::mt19937_64& rng, std::vector<KvOp>& history) {
  std::vector<int> answered;
  for (int i = 0; i < static_cast<int>(history.size()); ++i) {
    if (history[i].outcome == Outcome::kOk && history[i].kind != Kind::kSet) {
      answered.push_back(i);
    }
  }
  if (answered.empty()) return;
  KvOp& op = history[answered[std::uniform_int_distribution<size_t>(
      0, answered.size() - 1)(rng)]];
  switch (op.kind) {
    case Kind::kGet:
    case Kind::kCompareSet:
      op.found = !op.found || op.kind == Kind::kCompareSet;
      op.result = op.result == "a" ? "b" : "a";
      break;
    case Kind::kAdd:
      op.result = absl::StrCat(op.result, "1");
      break;
    case Kind::kDelete:
    case Kind::kSet:
      op.found = !op.found;
      break;
  }
}

// The definition itself, for small histories: some op that no pending
// acknowledged op precedes in real time takes effect next, until every
// acknowledged op has; unknown ops may be left out.
bool BruteForce(const std::vector<KvOp>& all) {
  std::map<std::string, std::vector<KvOp>> by_key;
  for (const KvOp& op : all) {
    if (op.outcome == Outcome::kNotApplied) continue;
    by_key[op.key].push_back(op);
  }
  for (const auto& [key, ops] : by_key) {
    const int n = static_cast<int>(ops.size());
    std::set<std::pair<uint32_t, std::optional<std::string>>> failed;
    std::function<bool(uint32_t, std::optional<std::string>)> search =
        [&](uint32_t done, std::optional<std::string> state) {
          bool all_known = true;
          for (int i = 0; i < n; ++i) {
            if (!(done >> i & 1) && ops[i].outcome == Outcome::kOk) {
              all_known = false;
            }
          }
          if (all_known) return true;
          if (failed.count({done, state})) return false;
          for (int i = 0; i < n; ++i) {
            if (done >> i & 1) continue;
            bool minimal = true;
            for (int j = 0; j < n; ++j) {
              if (j != i && !(done >> j & 1) &&
                  ops[j].outcome == Outcome::kOk &&
                  ops[j].returned < ops[i].invoked) {
                minimal = false;
              }
            }
            if (!minimal) continue;
            std::optional<std::string> next = state;
            if (!Model::Matches(next, ops[i])) continue;
            if (search(done | (1u << i), next)) return true;
          }
          failed.insert({done, state});
          return false;
        };
    if (!search(0, std::nullopt)) return false;
  }
  return true;
}

TEST(LinearizabilityTest, AgreesWithTheDefinitionOnSmallRandomHistories) {
  std::mt19937_64 rng(35);
  int linearizable = 0, not_linearizable = 0;
  for (int round = 0; round < 5000; ++round) {
    GenOptions o;
    o.ops = 3 + round % 9;
    o.clients = 2 + round % 3;
    o.unknown = round % 2 == 0 ? 0.0 : 0.25 + 0.1 * (round % 4);
    if (round % 5 == 4) {
      o.nemesis_like = true;
      o.keys = {"counter", "k"};
    }
    std::vector<KvOp> history = Generate(rng, o);
    const bool corrupt = round % 3 != 0;
    if (corrupt) Corrupt(rng, history);
    const bool want = BruteForce(history);
    if (!corrupt) {
      ASSERT_TRUE(want) << "generator bug, round " << round;
    }
    LinearizabilityResult r = Check(history);
    ASSERT_NE(r.verdict, Verdict::kTimedOut);
    std::string dump;
    for (int i = 0; i < static_cast<int>(history.size()); ++i) {
      absl::StrAppend(&dump, "#", i, " ", DescribeOp(history[i], T(0)), "\n");
    }
    ASSERT_EQ(r.verdict == Verdict::kLinearizable, want)
        << "round " << round << "\n"
        << dump << r.explanation;
    (want ? linearizable : not_linearizable) += 1;
  }
  // Both verdicts were exercised in earnest.
  EXPECT_GT(linearizable, 1000);
  EXPECT_GT(not_linearizable, 500);
}

// A nemesis-sized history: 16 clients, 4 keys, 12k ops with 2% unanswered.
GenOptions LargeHistory() {
  GenOptions o;
  o.clients = 16;
  o.ops = 12000;
  o.keys = {"counter", "leader", "addr/0", "addr/1"};
  o.values = {"",  "a", "b", "c",        "d",       "e",
              "1", "2", "3", "10.0.0.1", "10.0.0.2"};
  o.max_gap_us = 2000;
  o.max_duration_us = 3000;
  o.unknown = 0.02;
  return o;
}

#ifdef NDEBUG
constexpr absl::Duration kLargeHistoryLimit = absl::Seconds(1);
#else
// Unoptimized and sanitized builds run the same search several times slower.
constexpr absl::Duration kLargeHistoryLimit = absl::Seconds(10);
#endif

TEST(LinearizabilityTest, ThousandsOfOpsOnAFewKeysDecidedWithinASecond) {
  std::mt19937_64 rng(7);
  // Small values, so that many orders give the same states: the hard case.
  std::vector<KvOp> history = Generate(rng, LargeHistory());
  absl::Time start = absl::Now();
  LinearizabilityResult r = CheckLinearizable(history, absl::Seconds(30));
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.verdict, Verdict::kLinearizable) << r.explanation;
  EXPECT_EQ(r.keys, 4);
  EXPECT_GT(r.ops, 11000);
  EXPECT_LT(took, kLargeHistoryLimit);
  std::cout << "linearizable: " << r.ops << " ops on " << r.keys
            << " keys decided in " << took << "\n";

  // A nemesis-like history with one lost add in its middle.
  GenOptions nemesis = LargeHistory();
  nemesis.nemesis_like = true;
  nemesis.keys = {"counter", "leader", "addr/0", "addr/1"};
  std::vector<KvOp> stale = Generate(rng, nemesis);
  start = absl::Now();
  r = CheckLinearizable(stale, absl::Seconds(30));
  took = absl::Now() - start;
  EXPECT_EQ(r.verdict, Verdict::kLinearizable) << r.explanation;
  EXPECT_LT(took, kLargeHistoryLimit);
  std::cout << "nemesis-like, linearizable: " << r.ops << " ops on " << r.keys
            << " keys decided in " << took << "\n";
  for (size_t i = stale.size() / 2; i < stale.size(); ++i) {
    KvOp& op = stale[i];
    if (op.outcome == Outcome::kOk && op.kind == Kind::kAdd) {
      op.result = absl::StrCat(op.result, "0");
      break;
    }
  }
  start = absl::Now();
  r = CheckLinearizable(stale, absl::Seconds(30));
  const absl::Duration took_bad = absl::Now() - start;
  EXPECT_EQ(r.verdict, Verdict::kNotLinearizable);
  EXPECT_EQ(r.key, "counter");
  EXPECT_LT(took_bad, kLargeHistoryLimit);
  std::cout << "not linearizable: decided in " << took_bad << "\n"
            << r.explanation.substr(0, 3000) << "\n";
}

TEST(LinearizabilityTest, ManyUnansweredOpsAcrossFailoversStayCheap) {
  // One op in ten unanswered, each pending forever: the search tries an
  // unknown op only where the next op sees its effect.
  std::mt19937_64 rng(11);
  GenOptions o = LargeHistory();
  o.nemesis_like = true;
  o.ops = 5000;
  o.unknown = 0.1;
  std::vector<KvOp> history = Generate(rng, o);
  const absl::Time start = absl::Now();
  LinearizabilityResult r = CheckLinearizable(history, absl::Seconds(30));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.verdict, Verdict::kLinearizable) << r.explanation;
  EXPECT_LT(took, kLargeHistoryLimit);
  std::cout << r.ops << " ops, 10% unanswered, decided in " << took << "\n";
}

TEST(LinearizabilityTest, BudgetGivesTimedOutOnAPathologicalHistory) {
  // 40 unanswered adds of distinct powers of two, all concurrent, then a read
  // of a sum no subset makes: proving it means trying 2^40 subsets.
  std::vector<KvOp> history;
  for (int i = 0; i < 40; ++i) {
    history.push_back(Unknown(Add(i, "n", int64_t{1} << i, 0, 0, 0)));
  }
  history.push_back(Get(99, "n", "-1", 10, 11));
  const absl::Time start = absl::Now();
  LinearizabilityResult r = CheckLinearizable(history, absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.verdict, Verdict::kTimedOut);
  EXPECT_EQ(r.key, "n");
  EXPECT_THAT(r.explanation, HasSubstr("key \"n\": search ran out of its "
                                       "budget"));
  EXPECT_LT(took, absl::Seconds(2));
}

}  // namespace
}  // namespace muster::testing
