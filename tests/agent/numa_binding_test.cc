// --numa-binding on fake sysfs trees: which CPUs each local rank gets in each
// of torchrun's modes, and the warnings of machines that cannot be bound.
#include "agent/src/numa_binding.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream(path) << text << "\n";
}

// Two NUMA nodes in one socket: node 0 = CPUs 0-3 (cores {0,1} {2,3}, L3
// domains {0,1} {2,3}), node 1 = CPUs 4-7 (cores {4,5} {6,7}, one L3).
// Four GPUs: two on node 0, two on node 1.
std::string FakeMachine(const std::string& name, bool gpus = true,
                        const std::string& gpu3_node = "1") {
  const std::string root =
      absl::StrCat(::testing::TempDir(), "/numa_", name, "_", getpid());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/proc");
  const std::string buses[] = {"0000:17:00.0", "0000:31:00.0", "0000:B1:00.0",
                               "0000:CA:00.0"};
  const std::string nodes[] = {"0", "0", "1", gpu3_node};
  for (int g = 0; gpus && g < 4; ++g) {
    std::filesystem::create_directories(
        absl::StrCat(root, "/proc/driver/nvidia/gpus/", buses[g]));
    std::string lower = buses[g];
    for (char& c : lower) c = static_cast<char>(std::tolower(c));
    Write(absl::StrCat(root, "/sys/bus/pci/devices/", lower, "/numa_node"),
          nodes[g]);
  }
  Write(root + "/sys/devices/system/node/node0/cpulist", "0-3");
  Write(root + "/sys/devices/system/node/node1/cpulist", "4-7");
  for (int c = 0; c < 8; ++c) {
    const std::string base =
        absl::StrCat(root, "/sys/devices/system/cpu/cpu", c);
    Write(base + "/topology/physical_package_id", "0");
    Write(base + "/topology/core_id", absl::StrCat(c / 2));
    Write(base + "/cache/index3/shared_cpu_list", c < 2   ? "0-1"
                                                  : c < 4 ? "2-3"
                                                          : "4-7");
  }
  return root;
}

std::vector<std::vector<int>> Bind(const std::string& mode, int nproc,
                                   const NumaTopology& t) {
  auto b = ComputeNumaBinding(mode, nproc, t);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : std::vector<std::vector<int>>{};
}

TEST(NumaBindingTest, CpuLists) {
  EXPECT_THAT(ParseCpuList("0-2,5,7-8"), ElementsAre(0, 1, 2, 5, 7, 8));
  EXPECT_TRUE(ParseCpuList("3-1").empty());
  EXPECT_EQ(FormatCpuList({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

TEST(NumaBindingTest, ReadsTheTopology) {
  NumaTopology t = ReadNumaTopology(FakeMachine("read"), {});
  EXPECT_THAT(t.gpu_nodes, ElementsAre(0, 0, 1, 1));
  EXPECT_EQ(t.node_cpus.size(), 2u);
  EXPECT_EQ(t.allowed.size(), 8u);
  // CUDA_VISIBLE_DEVICES picks and orders the GPUs.
  NumaTopology v =
      ReadNumaTopology(FakeMachine("cvd"), {{"CUDA_VISIBLE_DEVICES", "3,0"}});
  EXPECT_THAT(v.gpu_nodes, ElementsAre(1, 0));
}

TEST(NumaBindingTest, Modes) {
  NumaTopology t = ReadNumaTopology(FakeMachine("modes"), {});
  EXPECT_THAT(Bind("node", 4, t),
              ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(0, 1, 2, 3),
                          ElementsAre(4, 5, 6, 7), ElementsAre(4, 5, 6, 7)));
  // One socket holds both nodes.
  EXPECT_THAT(Bind("socket", 1, t),
              ElementsAre(ElementsAre(0, 1, 2, 3, 4, 5, 6, 7)));
  // Two ranks per node share its two cores out, siblings together.
  EXPECT_THAT(Bind("exclusive", 4, t),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3),
                          ElementsAre(4, 5), ElementsAre(6, 7)));
  // Node 0 has two L3 domains, node 1 one.
  EXPECT_THAT(Bind("core-complex", 4, t),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3),
                          ElementsAre(4, 5, 6, 7), ElementsAre(4, 5, 6, 7)));
  EXPECT_TRUE(Bind("", 4, t).empty());
}

TEST(NumaBindingTest, StaysInsideTheAllowedCpus) {
  NumaTopology t = ReadNumaTopology(FakeMachine("allowed"), {}, {1, 2, 5});
  EXPECT_THAT(
      Bind("node", 3, t),
      ElementsAre(ElementsAre(1, 2), ElementsAre(1, 2), ElementsAre(5)));
}

TEST(NumaBindingTest, MachinesThatCannotBeBoundSayWhy) {
  NumaTopology no_gpu = ReadNumaTopology(FakeMachine("nogpu", false), {});
  auto b = ComputeNumaBinding("node", 2, no_gpu);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("no NVIDIA GPU"));
  EXPECT_THAT(b.status().message(), HasSubstr("workers run without binding"));

  NumaTopology no_nodes;  // no /sys/devices/system/node at all
  b = ComputeNumaBinding("socket", 1, no_nodes);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("shows no NUMA nodes"));

  NumaTopology unknown =
      ReadNumaTopology(FakeMachine("unknown", true, "-1"), {});
  b = ComputeNumaBinding("node", 4, unknown);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("local rank 3"));

  NumaTopology t = ReadNumaTopology(FakeMachine("few"), {});
  b = ComputeNumaBinding("node", 5, t);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("5 workers but 4 visible GPU"));
}

TEST(NumaBindingTest, ExclusiveNeedsACorePerRank) {
  NumaTopology t =
      ReadNumaTopology(FakeMachine("excl"), {}, {0, 1, 4, 5, 6, 7});
  auto b = ComputeNumaBinding("exclusive", 4, t);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("1 usable cores for 2 workers"));
}

}  // namespace
}  // namespace muster::agent
