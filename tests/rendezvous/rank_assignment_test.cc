#include "muster/rendezvous/rank_assignment.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::rendezvous {
namespace {

using ::testing::HasSubstr;

MemberSpec Spec(std::string id, int64_t seq, int lws = 1, int hint = -1) {
  return MemberSpec{.node_id = std::move(id),
                    .local_world_size = lws,
                    .node_rank_hint = hint,
                    .join_seq = seq};
}

// Node ids by group rank.
std::vector<std::string> Order(const std::vector<RankAssignment>& ranks) {
  std::vector<std::string> out;
  for (const RankAssignment& r : ranks) out.push_back(r.node_id);
  return out;
}

// Issue 11: two nodes of INT32_MAX workers used to wrap the world size.
TEST(AssignRanksTest, WorldSizeIsSummedIn64BitsAndCapped) {
  auto r =
      AssignRanks({}, {Spec("a", 0, 2147483647), Spec("b", 1, 2147483647)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("4294967294 workers in all, above the limit"));
}

TEST(AssignRanksTest, NewcomersInJoinOrder) {
  auto ranks = AssignRanks({}, {Spec("c", 7), Spec("a", 2), Spec("b", 5)});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_EQ(Order(*ranks), (std::vector<std::string>{"a", "b", "c"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*ranks)[i].group_rank, i);
    EXPECT_EQ((*ranks)[i].rank_offset, i);
    EXPECT_EQ((*ranks)[i].local_world_size, 1);
  }
}

TEST(AssignRanksTest, EqualJoinSeqKeepsInputOrder) {
  auto ranks = AssignRanks({}, {Spec("z", 1), Spec("y", 1), Spec("x", 0)});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_EQ(Order(*ranks), (std::vector<std::string>{"x", "z", "y"}));
}

TEST(AssignRanksTest, HeterogeneousLocalWorldSizesGivePrefixSumOffsets) {
  auto ranks = AssignRanks(
      {}, {Spec("a", 0, 4), Spec("b", 1, 2), Spec("c", 2, 1), Spec("d", 3, 8)});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_EQ(ranks->size(), 4u);
  EXPECT_EQ((*ranks)[0].rank_offset, 0);
  EXPECT_EQ((*ranks)[1].rank_offset, 4);
  EXPECT_EQ((*ranks)[2].rank_offset, 6);
  EXPECT_EQ((*ranks)[3].rank_offset, 7);
  EXPECT_EQ((*ranks)[3].local_world_size, 8);
}

TEST(AssignRanksTest, SurvivorsKeepTheirOrderBeforeNewcomers) {
  // b was rank 0 and a rank 1 last round; a rejoined first, the newcomer c
  // joined before both.
  auto ranks = AssignRanks({"b", "gone", "a"},
                           {Spec("c", 0), Spec("a", 1), Spec("b", 2)});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_EQ(Order(*ranks), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ((*ranks)[2].group_rank, 2);
}

TEST(AssignRanksTest, HintsWinAndOthersFillTheGaps) {
  // d wants rank 0 and a wants rank 2; the survivor c and the newcomer b fill
  // ranks 1 and 3.
  auto ranks = AssignRanks({"c"}, {Spec("a", 0, 2, 2), Spec("b", 1, 1),
                                   Spec("c", 2, 3), Spec("d", 3, 1, 0)});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_EQ(Order(*ranks), (std::vector<std::string>{"d", "c", "a", "b"}));
  EXPECT_EQ((*ranks)[0].rank_offset, 0);
  EXPECT_EQ((*ranks)[1].rank_offset, 1);
  EXPECT_EQ((*ranks)[2].rank_offset, 4);
  EXPECT_EQ((*ranks)[3].rank_offset, 6);
}

TEST(AssignRanksTest, HintBeatsSurvivorOrder) {
  auto ranks = AssignRanks({"a", "b"}, {Spec("a", 0), Spec("b", 1, 1, 0)});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_EQ(Order(*ranks), (std::vector<std::string>{"b", "a"}));
}

TEST(AssignRanksTest, DuplicateHintNamesBothNodesAndTheFix) {
  auto ranks = AssignRanks(
      {}, {Spec("n1", 0, 1, 1), Spec("n2", 1, 1, 1), Spec("n3", 2)});
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ranks.status().message(), HasSubstr("n1"));
  EXPECT_THAT(ranks.status().message(), HasSubstr("n2"));
  EXPECT_THAT(ranks.status().message(), HasSubstr("--node-rank=1"));
  EXPECT_THAT(ranks.status().message(),
              HasSubstr("distinct --node-rank values 0..2"));
}

TEST(AssignRanksTest, OutOfRangeHintIsRefused) {
  for (int hint : {2, 5, -2}) {
    auto ranks = AssignRanks({}, {Spec("n1", 0), Spec("n2", 1, 1, hint)});
    ASSERT_FALSE(ranks.ok()) << hint;
    EXPECT_EQ(ranks.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ranks.status().message(), HasSubstr("n2"));
    EXPECT_THAT(ranks.status().message(),
                HasSubstr(absl::StrCat("group rank ", hint)));
    EXPECT_THAT(ranks.status().message(), HasSubstr("2 nodes"));
  }
}

TEST(AssignRanksTest, RepeatedNodeIdIsRefused) {
  auto ranks = AssignRanks({}, {Spec("n1", 0), Spec("n1", 1)});
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ranks.status().message(), HasSubstr("'n1' appears twice"));
}

TEST(AssignRanksTest, EmptyMembersAndBadSizesAreRefused) {
  EXPECT_EQ(AssignRanks({"a"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto ranks = AssignRanks({}, {Spec("a", 0, 0)});
  EXPECT_EQ(ranks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ranks.status().message(), HasSubstr("local_world_size 0"));
  EXPECT_EQ(AssignRanks({}, {Spec("", 0)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AssignRanksTest, SingleNode) {
  auto ranks = AssignRanks({}, {Spec("solo", 42, 4)});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_EQ(ranks->size(), 1u);
  EXPECT_EQ((*ranks)[0].group_rank, 0);
  EXPECT_EQ((*ranks)[0].rank_offset, 0);
  EXPECT_EQ((*ranks)[0].local_world_size, 4);
}

}  // namespace
}  // namespace muster::rendezvous
