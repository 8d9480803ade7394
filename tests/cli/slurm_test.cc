// Slurm: hostlist expansion, the allocation read from SLURM_*, and how the
// launcher's command line maps onto it.
#include "cli/slurm.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/launch_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/static_layout.h"

namespace muster::cli {
namespace {

using agent::RendezvousMode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Env = std::map<std::string, std::string>;
using Hosts = std::vector<std::string>;

Hosts Expand(absl::string_view text) {
  absl::StatusOr<Hosts> hosts = ExpandHostlist(text);
  EXPECT_TRUE(hosts.ok()) << text << " -> " << hosts.status();
  return hosts.ok() ? *hosts : Hosts{};
}

// The message of the INVALID_ARGUMENT that expanding `text` must give; it must
// quote the text.
std::string ExpandError(absl::string_view text) {
  absl::StatusOr<Hosts> hosts = ExpandHostlist(text);
  EXPECT_FALSE(hosts.ok()) << text << " expanded";
  if (hosts.ok()) return "";
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hosts.status().message(),
              HasSubstr(absl::StrCat("\"", text, "\"")));
  return std::string(hosts.status().message());
}

TEST(ExpandHostlistTest, PlainNames) {
  EXPECT_THAT(Expand("node0"), ElementsAre("node0"));
  EXPECT_THAT(Expand("a,b,c"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Expand(" a.example.org,b-1 "),
              ElementsAre("a.example.org", "b-1"));
}

TEST(ExpandHostlistTest, RangesAndLists) {
  EXPECT_THAT(Expand("gpu[01-04,07]"),
              ElementsAre("gpu01", "gpu02", "gpu03", "gpu04", "gpu07"));
  EXPECT_THAT(Expand("a,b[1-2]"), ElementsAre("a", "b1", "b2"));
  EXPECT_THAT(Expand("b[1-2],a"), ElementsAre("b1", "b2", "a"));
  EXPECT_THAT(Expand("n[3]"), ElementsAre("n3"));
  EXPECT_THAT(Expand("n[5,1]"), ElementsAre("n5", "n1"));
  EXPECT_THAT(Expand("[1-2]x"), ElementsAre("1x", "2x"));
}

TEST(ExpandHostlistTest, ZeroPaddingFollowsTheLowerBound) {
  EXPECT_THAT(Expand("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(Expand("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(Expand("n[098-101]"),
              ElementsAre("n098", "n099", "n100", "n101"));
  EXPECT_THAT(Expand("n[0-1]"), ElementsAre("n0", "n1"));
  EXPECT_THAT(Expand("n[0008]"), ElementsAre("n0008"));
}

TEST(ExpandHostlistTest, SuffixesAndSeveralGroupsMultiply) {
  EXPECT_THAT(Expand("gpu[1-2]-ib"), ElementsAre("gpu1-ib", "gpu2-ib"));
  EXPECT_THAT(Expand("r[1-2]-n[01-02]"),
              ElementsAre("r1-n01", "r1-n02", "r2-n01", "r2-n02"));
  EXPECT_THAT(Expand("x[1-2],y[7,9]z"), ElementsAre("x1", "x2", "y7z", "y9z"));
}

TEST(ExpandHostlistTest, LargeListsUpToTheLimit) {
  Hosts hosts = Expand("n[00001-65536]");
  ASSERT_EQ(hosts.size(), 65536u);
  EXPECT_EQ(hosts.front(), "n00001");
  EXPECT_EQ(hosts.back(), "n65536");
}

TEST(ExpandHostlistTest, BadInputIsNamed) {
  EXPECT_THAT(ExpandError(""), HasSubstr("no host names"));
  EXPECT_THAT(ExpandError("   "), HasSubstr("no host names"));
  EXPECT_THAT(ExpandError("gpu[01-04"),
              HasSubstr("'[' without a matching ']'"));
  EXPECT_THAT(ExpandError("gpu01-04]"), HasSubstr("']' without '['"));
  EXPECT_THAT(ExpandError("gpu[[1-2]]"), HasSubstr("'[' inside brackets"));
  EXPECT_THAT(ExpandError("gpu[04-01]"), HasSubstr("ends below its start"));
  EXPECT_THAT(ExpandError("gpu[a-b]"), HasSubstr("'a' in range \"a-b\""));
  EXPECT_THAT(ExpandError("gpu[1-]"), HasSubstr("needs a number on each side"));
  EXPECT_THAT(ExpandError("gpu[-3]"), HasSubstr("needs a number on each side"));
  EXPECT_THAT(ExpandError("gpu[]"), HasSubstr("empty range"));
  EXPECT_THAT(ExpandError("gpu[1,,2]"), HasSubstr("empty range"));
  EXPECT_THAT(ExpandError("gpu[1-2-3]"), HasSubstr("'-' in range"));
  EXPECT_THAT(ExpandError("a,,b"), HasSubstr("empty host name"));
  EXPECT_THAT(ExpandError("a,"), HasSubstr("empty host name"));
  EXPECT_THAT(ExpandError("a b"), HasSubstr("white space"));
  EXPECT_THAT(ExpandError("n[1-99999999]"), HasSubstr("more than 65536 hosts"));
  EXPECT_THAT(ExpandError("n[0-65536]"), HasSubstr("more than 65536 hosts"));
  EXPECT_THAT(ExpandError("r[1-300]-n[1-300]"),
              HasSubstr("more than 65536 hosts"));
  EXPECT_THAT(ExpandError("n[1-9999999999999999999]"), HasSubstr("too large"));
}

// A task of `srun -N4 --ntasks-per-node=1` on the third node.
Env ThirdOfFour() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_NNODES", "4"},
          {"SLURM_NODEID", "2"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_JOB_NODELIST", "gpu[01-04]"}};
}

TEST(DetectSlurmAllocationTest, OutsideAnAllocation) {
  absl::StatusOr<std::optional<SlurmAllocation>> a = DetectSlurmAllocation({});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->has_value());
  // Each of the four is needed; salloc's shell on the login node has no
  // SLURM_NODEID, for one.
  for (const char* missing :
       {"SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST"}) {
    Env env = ThirdOfFour();
    env.erase(missing);
    a = DetectSlurmAllocation(env);
    ASSERT_TRUE(a.ok()) << missing << ": " << a.status();
    EXPECT_FALSE(a->has_value()) << missing;
    env[missing] = "";
    a = DetectSlurmAllocation(env);
    ASSERT_TRUE(a.ok()) << missing << ": " << a.status();
    EXPECT_FALSE(a->has_value()) << missing << " empty";
  }
}

TEST(DetectSlurmAllocationTest, ReadsTheAllocation) {
  absl::StatusOr<std::optional<SlurmAllocation>> a =
      DetectSlurmAllocation(ThirdOfFour());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->job_id, "4242");
  EXPECT_EQ((*a)->nnodes, 4);
  EXPECT_EQ((*a)->node_id, 2);
  EXPECT_THAT((*a)->hosts, ElementsAre("gpu01", "gpu02", "gpu03", "gpu04"));
  EXPECT_EQ((*a)->nodelist_source, "SLURM_JOB_NODELIST");
}

TEST(DetectSlurmAllocationTest, OldNodelistNameAndStepNodelist) {
  Env env = ThirdOfFour();
  env.erase("SLURM_JOB_NODELIST");
  env["SLURM_NODELIST"] = "cn[7-10]";
  auto a = DetectSlurmAllocation(env);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  EXPECT_EQ((*a)->hosts.front(), "cn7");
  EXPECT_EQ((*a)->nodelist_source, "SLURM_NODELIST");
  // `srun -N2` in a larger allocation: the step's own list names the master.
  env = ThirdOfFour();
  env["SLURM_NNODES"] = "3";
  env["SLURM_STEP_NODELIST"] = "gpu[02-04]";
  a = DetectSlurmAllocation(env);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  EXPECT_EQ((*a)->hosts.front(), "gpu02");
  EXPECT_EQ((*a)->nodelist_source, "SLURM_STEP_NODELIST");
}

std::string DetectError(const Env& env) {
  auto a = DetectSlurmAllocation(env);
  EXPECT_FALSE(a.ok()) << "detected";
  if (a.ok()) return "";
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(a.status().message());
}

TEST(DetectSlurmAllocationTest, BadValuesAreNamed) {
  Env env = ThirdOfFour();
  env["SLURM_NNODES"] = "four";
  EXPECT_THAT(DetectError(env), HasSubstr("SLURM_NNODES=four: expected"));
  env["SLURM_NNODES"] = "0";
  EXPECT_THAT(DetectError(env), HasSubstr("SLURM_NNODES=0"));
  env = ThirdOfFour();
  env["SLURM_NODEID"] = "-1";
  EXPECT_THAT(DetectError(env), HasSubstr("SLURM_NODEID=-1"));
  env["SLURM_NODEID"] = "4";
  EXPECT_THAT(DetectError(env),
              HasSubstr("SLURM_NODEID=4: with SLURM_NNODES=4 node indexes are "
                        "0..3"));
  env = ThirdOfFour();
  env["SLURM_JOB_NODELIST"] = "gpu[01-04";
  EXPECT_THAT(DetectError(env),
              HasSubstr("SLURM_JOB_NODELIST=gpu[01-04: hostlist \"gpu[01-04\": "
                        "'[' without a matching ']'"));
  env["SLURM_JOB_NODELIST"] = "gpu[01-03]";
  EXPECT_THAT(DetectError(env),
              HasSubstr("SLURM_JOB_NODELIST=gpu[01-03]: names 3 host(s) but "
                        "SLURM_NNODES=4"));
}

const std::string* NothingGiven(absl::string_view) { return nullptr; }

// `given` for SlurmImpliedFlags: the flags in `flags` were given.
std::function<const std::string*(absl::string_view)> Given(
    std::map<std::string, std::string> flags) {
  auto shared =
      std::make_shared<std::map<std::string, std::string>>(std::move(flags));
  return [shared](absl::string_view name) -> const std::string* {
    auto it = shared->find(std::string(name));
    return it == shared->end() ? nullptr : &it->second;
  };
}

TEST(SlurmImpliedFlagsTest, MapsTheAllocationToStaticFlags) {
  auto flags = SlurmImpliedFlags(ThirdOfFour(), NothingGiven);
  ASSERT_TRUE(flags.ok()) << flags.status();
  std::map<std::string, std::string> by_flag;
  for (const ImpliedFlag& f : *flags) by_flag[f.flag] = f.value;
  EXPECT_EQ(by_flag,
            (std::map<std::string, std::string>{{"nnodes", "4"},
                                                {"node-rank", "2"},
                                                {"master-addr", "gpu01"},
                                                {"rdzv-id", "4242"}}));
  EXPECT_EQ((*flags)[0].source, "SLURM_NNODES");
}

TEST(SlurmImpliedFlagsTest, ExplicitLayoutFlagsWinWhole) {
  for (const char* flag :
       {"nnodes", "node-rank", "master-addr", "rdzv-endpoint", "standalone"}) {
    auto flags = SlurmImpliedFlags(ThirdOfFour(), Given({{flag, "x"}}));
    ASSERT_TRUE(flags.ok()) << flag << ": " << flags.status();
    EXPECT_THAT(*flags, IsEmpty()) << flag;
  }
  // A given job id is kept; the layout still comes from Slurm.
  auto flags = SlurmImpliedFlags(ThirdOfFour(), Given({{"rdzv-id", "run"}}));
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->size(), 3u);
  for (const ImpliedFlag& f : *flags) EXPECT_NE(f.flag, "rdzv-id");
  // An endpoint with only a port moves the server; the layout stays Slurm's.
  flags =
      SlurmImpliedFlags(ThirdOfFour(), Given({{"rdzv-endpoint", ":29401"}}));
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->size(), 4u);
}

TEST(SlurmImpliedFlagsTest, SeveralTasksPerNodeIsAnError) {
  Env env = ThirdOfFour();
  env["SLURM_LOCALID"] = "1";
  auto flags = SlurmImpliedFlags(env, NothingGiven);
  ASSERT_FALSE(flags.ok());
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(flags.status().message(),
              HasSubstr("SLURM_LOCALID=1: this step runs several tasks"));
  EXPECT_THAT(flags.status().message(), HasSubstr("--ntasks-per-node=1"));
}

// --- through the launcher's command line

HostResources FourGpus() {
  HostResources h;
  h.cpus = 32;
  h.gpus = 4;
  h.gpu_source = "/proc/driver/nvidia/gpus/";
  return h;
}

LaunchCommand ParseOk(const std::vector<std::string>& args, const Env& env) {
  absl::StatusOr<LaunchCommand> cmd = ParseLaunchCommand(args, env, FourGpus());
  EXPECT_TRUE(cmd.ok()) << cmd.status();
  return cmd.ok() ? *std::move(cmd) : LaunchCommand{};
}

TEST(SlurmLaunchTest, NeedsNoOtherFlagInsideAnAllocation) {
  LaunchCommand cmd =
      ParseOk({"--nproc-per-node=4", "./train", "--lr=0.1"}, ThirdOfFour());
  const agent::AgentConfig& c = cmd.config;
  // Node rank 0 (gpu01) runs the server.
  ExpectStaticLayout(c, {.master_addr = "gpu01",
                         .master_port = 29500,
                         .rdzv_endpoint = "gpu01:29400",
                         .nodes = 4,
                         .node_rank = 2,
                         .embed_server = false});
  EXPECT_EQ(c.run_id, "4242");
  EXPECT_EQ(c.nproc_per_node, 4);
  EXPECT_THAT(c.program, ElementsAre("./train", "--lr=0.1"));
  EXPECT_THAT(cmd.warnings, IsEmpty());

  Env first = ThirdOfFour();
  first["SLURM_NODEID"] = "0";
  cmd = ParseOk({"--nproc-per-node=gpu", "./train"}, first);
  EXPECT_EQ(cmd.config.node_rank, 0);
  EXPECT_TRUE(cmd.config.embed_server);
  EXPECT_EQ(cmd.config.embed_listen, "0.0.0.0:29400");
  EXPECT_EQ(cmd.config.nproc_per_node, 4);
}

TEST(SlurmLaunchTest, OneNodeRunsStandaloneWithTheJobId) {
  Env env = {{"SLURM_JOB_ID", "77"},
             {"SLURM_NNODES", "1"},
             {"SLURM_NODEID", "0"},
             {"SLURM_JOB_NODELIST", "cn5"}};
  LaunchCommand cmd = ParseOk({"--nproc-per-node=2", "./train"}, env);
  EXPECT_EQ(cmd.config.mode, RendezvousMode::kStandalone);
  EXPECT_EQ(cmd.config.embed_listen, "127.0.0.1:0");
  EXPECT_EQ(cmd.config.run_id, "77");
}

TEST(SlurmLaunchTest, FlagsAndPetVariablesWin) {
  // An explicit layout: Slurm is not consulted at all.
  LaunchCommand cmd =
      ParseOk({"--nnodes=2", "--node-rank=1", "--master-addr=head",
               "--nproc-per-node=1", "./train"},
              ThirdOfFour());
  EXPECT_EQ(cmd.config.max_nodes, 2);
  EXPECT_EQ(cmd.config.node_rank, 1);
  EXPECT_EQ(cmd.config.master_addr, "head");
  EXPECT_EQ(cmd.config.run_id, "none");
  // An elastic job against a musterd.
  cmd = ParseOk({"--nnodes=1:4", "--rdzv-endpoint=musterd:29400",
                 "--rdzv-id=mine", "./train"},
                ThirdOfFour());
  EXPECT_EQ(cmd.config.mode, RendezvousMode::kDynamic);
  EXPECT_EQ(cmd.config.run_id, "mine");
  // --standalone stays one node.
  cmd = ParseOk({"--standalone", "./train"}, ThirdOfFour());
  EXPECT_EQ(cmd.config.mode, RendezvousMode::kStandalone);
  EXPECT_THAT(cmd.warnings, IsEmpty());
  // PET_ variables count as given.
  Env env = ThirdOfFour();
  env["PET_NNODES"] = "1";
  cmd = ParseOk({"./train"}, env);
  EXPECT_EQ(cmd.config.mode, RendezvousMode::kStandalone);
  // A given job id is kept, the layout still comes from Slurm.
  cmd = ParseOk({"--rdzv-id=run7", "./train"}, ThirdOfFour());
  EXPECT_EQ(cmd.config.run_id, "run7");
  EXPECT_EQ(cmd.config.master_addr, "gpu01");
  // Ports of one's own, e.g. on nodes shared with another job.
  cmd = ParseOk({"--rdzv-endpoint=:29401", "--master-port=29501", "./train"},
                ThirdOfFour());
  EXPECT_EQ(cmd.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(cmd.config.master_addr, "gpu01");
  EXPECT_EQ(cmd.config.rdzv_endpoint, "gpu01:29401");
  EXPECT_EQ(cmd.config.master_port, 29501);
  EXPECT_EQ(cmd.config.node_rank, 2);
  // A master port of one's own.
  cmd = ParseOk({"--master-port=31000", "./train"}, ThirdOfFour());
  EXPECT_EQ(cmd.config.master_port, 31000);
  EXPECT_EQ(cmd.config.master_addr, "gpu01");
}

TEST(SlurmLaunchTest, BadSlurmEnvironmentIsAConfigurationError) {
  Env env = ThirdOfFour();
  env["SLURM_JOB_NODELIST"] = "gpu[01-04,]";
  absl::StatusOr<LaunchCommand> cmd =
      ParseLaunchCommand({"./train"}, env, FourGpus());
  ASSERT_FALSE(cmd.ok());
  EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cmd.status().message(),
              HasSubstr("SLURM_JOB_NODELIST=gpu[01-04,]"));
  // Help and version never look at Slurm.
  cmd = ParseLaunchCommand({"--help"}, env, FourGpus());
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_TRUE(cmd->show_help);
}

}  // namespace
}  // namespace muster::cli
