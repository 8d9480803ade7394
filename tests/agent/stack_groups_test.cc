// GroupStacks and ParsePythonDump (issue 28): pure functions, hand-made input.
#include "muster/rendezvous/stack_groups.h"

#include <map>
#include <string>
#include <vector>

#include "agent/src/python_prelude.h"
#include "agent/src/stack_capture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::agent {
namespace {

using ::muster::rendezvous::FormatStackGroups;
using ::muster::rendezvous::GroupStacks;
using ::muster::rendezvous::RankRanges;
using ::muster::rendezvous::StackGroup;
using ::muster::rendezvous::StackGroupsJson;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::RankStacks Rank(int rank, std::vector<std::string> frames,
                    std::vector<std::string> other = {}) {
  v1::RankStacks r;
  r.set_global_rank(rank);
  r.set_kind("native");
  v1::ThreadStack* main = r.add_threads();
  main->set_main(true);
  for (const std::string& f : frames) main->add_frames(f);
  if (!other.empty()) {
    v1::ThreadStack* t = r.add_threads();
    for (const std::string& f : other) t->add_frames(f);
  }
  return r;
}

TEST(GroupStacksTest, IdenticalStacksGroupLargestFirstOddOneMarked) {
  const std::vector<std::string> wait = {"pause", "wait_in_allreduce", "main"};
  const std::vector<std::string> stuck = {"pause", "stuck_in_data_loader",
                                          "main"};
  // Other threads do not split a group: ranks are grouped by main thread.
  std::vector<v1::RankStacks> ranks = {Rank(3, stuck), Rank(0, wait, {"poll"}),
                                       Rank(2, wait), Rank(1, wait)};
  std::vector<StackGroup> groups = GroupStacks(ranks);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_THAT(groups[0].ranks, ElementsAre(0, 1, 2));
  EXPECT_EQ(groups[0].frames, wait);
  EXPECT_FALSE(groups[0].odd_one_out);
  EXPECT_THAT(groups[1].ranks, ElementsAre(3));
  EXPECT_EQ(groups[1].frames, stuck);
  EXPECT_TRUE(groups[1].odd_one_out);
}

TEST(GroupStacksTest, EvenSplitHasNoOddOneOut) {
  std::vector<v1::RankStacks> ranks = {Rank(0, {"a"}), Rank(1, {"b"})};
  std::vector<StackGroup> groups = GroupStacks(ranks);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_THAT(groups[0].ranks, ElementsAre(0));  // a tie: lowest rank first
  EXPECT_FALSE(groups[0].odd_one_out);
  EXPECT_FALSE(groups[1].odd_one_out);
  // 5 against 3: the smaller group is not small enough to single out.
  ranks.clear();
  for (int r = 0; r < 8; ++r) ranks.push_back(Rank(r, {r < 5 ? "a" : "b"}));
  groups = GroupStacks(ranks);
  EXPECT_FALSE(groups[1].odd_one_out);
}

TEST(GroupStacksTest, UnreadableRanksGroupByTheirError) {
  v1::RankStacks bad;
  bad.set_global_rank(1);
  bad.set_error("process 7 is gone");
  std::vector<StackGroup> groups = GroupStacks({Rank(0, {"a"}), bad});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].error, "process 7 is gone");
}

TEST(GroupStacksTest, JsonAndTextForms) {
  std::vector<v1::RankStacks> ranks = {
      Rank(0, {"w", "main"}, {"poll"}), Rank(1, {"w", "main"}),
      Rank(2, {"w", "main"}), Rank(3, {"s", "main"})};
  nlohmann::json j = StackGroupsJson("job-1", ranks, {"host (node n): gone"});
  EXPECT_EQ(j["job"], "job-1");
  EXPECT_EQ(j["groups"][0]["ranks"], nlohmann::json({0, 1, 2}));
  EXPECT_EQ(j["groups"][0]["frames"], nlohmann::json({"w", "main"}));
  EXPECT_EQ(j["groups"][0]["other_threads"][0]["frames"],
            nlohmann::json({"poll"}));
  EXPECT_EQ(j["groups"][1]["odd_one_out"], true);
  EXPECT_EQ(j["missing"][0], "host (node n): gone");
  const std::string text = FormatStackGroups("job-1", ranks, {});
  EXPECT_THAT(text, HasSubstr("odd ones out: rank 3"));
  EXPECT_THAT(text, HasSubstr("ranks 0-2 (3 ranks, native)"));
  EXPECT_EQ(RankRanges({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

TEST(ParsePythonDumpTest, FunctionsInnermostFirstMainThreadFirst) {
  const std::string dump =
      "Thread 0x00007f55fd43a6c0 (most recent call first):\n"
      "  File \"/w/train.py\", line 5 in background_prefetch\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
      "\n"
      "Current thread 0x00007f55fd6f5040 (most recent call first):\n"
      "  File \"/w/train.py\", line 9 in stuck_in_data_loader\n"
      "  File \"/w/train.py\", line 20 in main\n"
      "  File \"/w/train.py\", line 23 in <module>\n"
      "  File \"<frozen runpy>\", line 88 in _run_code\n"
      "  File \"<string>\", line 30 in <module>\n";
  std::vector<v1::ThreadStack> threads = ParsePythonDump(dump, 0x7f55fd6f5040);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_TRUE(threads[0].main());
  EXPECT_THAT(threads[0].frames(),
              ElementsAre("stuck_in_data_loader", "main", "<module>"));
  EXPECT_THAT(threads[1].frames(), ElementsAre("background_prefetch", "run"));
}

// Windows: the bootstrap's dumping thread is the "Current thread" and is left
// out; the runpy frames have backslashes.
TEST(ParsePythonDumpTest, LeavesOutTheWatcherThread) {
  const std::string dump =
      "Thread 0x00001a2c (most recent call first):\r\n"
      "  File \"C:\\w\\train.py\", line 5 in background_prefetch\r\n"
      "\r\n"
      "Current thread 0x00001b00 (most recent call first):\r\n"
      "  File \"<string>\", line 30 in _muster_watch\r\n"
      "\r\n"
      "Thread 0x000019f0 (most recent call first):\r\n"
      "  File \"C:\\w\\train.py\", line 9 in stuck_in_data_loader\r\n"
      "  File \"C:\\Python38\\lib\\runpy.py\", line 87 in _run_code\r\n";
  std::vector<v1::ThreadStack> threads =
      ParsePythonDump(dump, 0x19f0, /*watcher_ident=*/0x1b00);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_TRUE(threads[0].main());
  EXPECT_EQ(threads[0].tid(), 0x19f0);
  EXPECT_THAT(threads[0].frames(), ElementsAre("stuck_in_data_loader"));
  EXPECT_THAT(threads[1].frames(), ElementsAre("background_prefetch"));
}

TEST(WithStacksPreludeTest, EachPythonFormKeepsItsArguments) {
  bool applied = false;
  const std::map<std::string, std::string> env;
  std::vector<std::string> script =
      WithStacksPrelude({"/usr/bin/python3", "-u", "train.py", "--lr", "1"},
                        "/usr/bin/python3", env, &applied);
  EXPECT_TRUE(applied);
  ASSERT_EQ(script.size(), 7u);
  EXPECT_EQ(script[2], "-c");
  EXPECT_THAT(script[3], HasSubstr("faulthandler.register"));
  EXPECT_THAT(script[3], HasSubstr("runpy.run_path"));
  EXPECT_THAT(std::vector<std::string>(script.begin() + 4, script.end()),
              ElementsAre("train.py", "--lr", "1"));
  std::vector<std::string> module = WithStacksPrelude(
      {"python3", "-u", "-m", "pkg.train", "x"}, "python3", env, &applied);
  EXPECT_TRUE(applied);
  EXPECT_THAT(module[3], HasSubstr("runpy.run_module"));
  EXPECT_THAT(std::vector<std::string>(module.begin() + 4, module.end()),
              ElementsAre("pkg.train", "x"));
  std::vector<std::string> code = WithStacksPrelude(
      {"python3", "-u", "-c", "print(1)", "s.py"}, "python3", env, &applied);
  EXPECT_TRUE(applied);
  EXPECT_THAT(code[3], HasSubstr("print(1)"));
  EXPECT_EQ(code.back(), "s.py");
  // Not the launcher's Python form, or turned off: unchanged.
  const std::vector<std::string> native = {"./train", "--x"};
  EXPECT_EQ(WithStacksPrelude(native, "", env, &applied), native);
  EXPECT_FALSE(applied);
  const std::vector<std::string> py = {"python3", "-u", "t.py"};
  EXPECT_EQ(WithStacksPrelude(py, "python3", {{"MUSTER_PYTHON_STACKS", "0"}},
                              &applied),
            py);
  EXPECT_FALSE(applied);
}

}  // namespace
}  // namespace muster::agent
