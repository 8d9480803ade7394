#include "cli/launch_flags.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/static_layout.h"

namespace muster::cli {
namespace {

using agent::AgentConfig;
using agent::RendezvousMode;
using ::testing::_;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

HostResources EightCpusNoGpu() {
  HostResources h;
  h.cpus = 8;
  h.gpus = 0;
  h.gpu_source = "no entries in /proc/driver/nvidia/gpus/ or /dev/nvidia<N>";
  return h;
}

absl::StatusOr<LaunchCommand> Parse(
    const Args& args, const Env& env = {},
    const HostResources& host = EightCpusNoGpu()) {
  return ParseLaunchCommand(args, env, host);
}

LaunchCommand ParseOk(const Args& args, const Env& env = {},
                      const HostResources& host = EightCpusNoGpu()) {
  absl::StatusOr<LaunchCommand> cmd = Parse(args, env, host);
  EXPECT_TRUE(cmd.ok()) << absl::StrJoin(args, " ") << " -> " << cmd.status();
  return cmd.ok() ? *std::move(cmd) : LaunchCommand{};
}

// The message of the INVALID_ARGUMENT that parsing `args` must return.
std::string ParseError(const Args& args, const Env& env = {},
                       const HostResources& host = EightCpusNoGpu()) {
  absl::StatusOr<LaunchCommand> cmd = Parse(args, env, host);
  EXPECT_FALSE(cmd.ok()) << absl::StrJoin(args, " ") << " parsed";
  if (cmd.ok()) return "";
  EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument)
      << cmd.status();
  return std::string(cmd.status().message());
}

Args With(Args args, const Args& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// --- every flag, both spellings, both forms, and PET_
// ------------------------------------------

struct FlagCase {
  std::string flag;   // dash spelling, without "--"
  std::string value;  // empty for a boolean flag
  Args extra;         // other flags the case needs (before the flag)
  std::function<void(const LaunchCommand&)> check;
};

std::vector<FlagCase> AllFlagCases() {
  const Args dynamic = {"--rdzv-endpoint=node0:29400", "--rdzv-id=j"};
  return {
      {"nnodes", "1:4", dynamic,
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.min_nodes, 1);
         EXPECT_EQ(c.config.max_nodes, 4);
       }},
      {"nproc-per-node",
       "3",
       {},
       [](const LaunchCommand& c) { EXPECT_EQ(c.config.nproc_per_node, 3); }},
      {"node-rank",
       "1",
       {"--nnodes=2", "--master-addr=10.0.0.1"},
       [](const LaunchCommand& c) { EXPECT_EQ(c.config.node_rank, 1); }},
      {"max-restarts",
       "3",
       {},
       [](const LaunchCommand& c) { EXPECT_EQ(c.config.max_restarts, 3); }},
      {"monitor-interval",
       "0.5",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.monitor_interval, absl::Milliseconds(500));
       }},
      {"role",
       "trainer",
       {},
       [](const LaunchCommand& c) { EXPECT_EQ(c.config.role, "trainer"); }},
      {"start-method", "forkserver", {}, [](const LaunchCommand&) {}},
      {"local-addr",
       "10.1.2.3",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.local_addr, "10.1.2.3");
       }},
      {"standalone",
       "",
       {"--nnodes=1"},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.mode, RendezvousMode::kStandalone);
         EXPECT_TRUE(c.config.embed_server);
       }},
      {"rdzv-backend",
       "static",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.mode, RendezvousMode::kStatic);
       }},
      {"rdzv-endpoint",
       "node7:1234",
       {"--rdzv-id=j"},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.mode, RendezvousMode::kDynamic);
         EXPECT_EQ(c.config.rdzv_endpoint, "node7:1234");
       }},
      {"rdzv-id",
       "job-7",
       {},
       [](const LaunchCommand& c) { EXPECT_EQ(c.config.run_id, "job-7"); }},
      {"rdzv-conf",
       "join_timeout=5",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.join_timeout, absl::Seconds(5));
       }},
      {"master-addr",
       "10.0.0.9",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.mode, RendezvousMode::kStatic);
         EXPECT_EQ(c.config.master_addr, "10.0.0.9");
       }},
      {"master-port",
       "29600",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.mode, RendezvousMode::kStatic);
         EXPECT_EQ(c.config.master_port, 29600);
       }},
      {"module",
       "",
       {},
       [](const LaunchCommand& c) {
         EXPECT_THAT(c.config.program,
                     ElementsAre("python3", "-u", "-m", "train.exe"));
       }},
      {"no-python",
       "",
       {},
       [](const LaunchCommand& c) {
         EXPECT_THAT(c.config.program, ElementsAre("train.exe"));
       }},
      {"run-path",
       "",
       {},
       [](const LaunchCommand& c) {
         EXPECT_THAT(c.config.program,
                     ElementsAre("python3", "-u", "-c",
                                 HasSubstr("runpy.run_path"), "train.exe"));
       }},
      {"log-dir",
       "/tmp/logs",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.log_dir, "/tmp/logs");
       }},
      {"redirects",
       "3",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.redirects, (std::map<int, int>{{-1, 3}}));
       }},
      {"tee",
       "0:1,1:2",
       {"--nproc-per-node=2"},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.tees, (std::map<int, int>{{0, 1}, {1, 2}}));
       }},
      {"prefix-output",
       "",
       {},
       [](const LaunchCommand& c) {
         EXPECT_TRUE(c.config.prefix_output);
         EXPECT_EQ(c.config.log_line_prefix_template, "[rank${rank}]:");
       }},
      {"local-ranks-filter",
       "0,2",
       {"--nproc-per-node=4"},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.local_ranks_filter, (std::set<int>{0, 2}));
       }},
      // torchrun 2.x's flags.
      {"shutdown-timeout",
       "12",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.stop_grace, absl::Seconds(12));
       }},
      {"signals-to-handle",
       "SIGTERM,SIGUSR1,usr2,15,HUP",
       {},
       [](const LaunchCommand& c) {
         EXPECT_THAT(c.config.signals_to_handle,
                     ElementsAre(SIGTERM, SIGUSR1, SIGUSR2, SIGHUP));
       }},
      {"numa-binding",
       "exclusive",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.numa_binding, "exclusive");
       }},
      {"recovery",
       "in-place",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.recovery, agent::Recovery::kInPlace);
       }},
      {"virtual-local-rank",
       "",
       {},
       [](const LaunchCommand& c) {
         EXPECT_TRUE(c.config.virtual_local_rank);
       }},
      {"event-log-handler",
       "console",
       {},
       [](const LaunchCommand& c) {
         EXPECT_EQ(c.config.event_log_handler, "console");
       }},
      {"duplicate-stdout-filters",
       "loss,,acc,step",
       {"-t3"},
       [](const LaunchCommand& c) {
         EXPECT_THAT(c.config.duplicate_stdout_filters,
                     ElementsAre("loss,acc", "step"));
         EXPECT_THAT(c.warnings, IsEmpty());
       }},
      {"duplicate-stderr-filters",
       "NCCL WARN",
       {"-t3"},
       [](const LaunchCommand& c) {
         EXPECT_THAT(c.config.duplicate_stderr_filters,
                     ElementsAre("NCCL WARN"));
       }},
      // muster's own.
      {"python",
       "/opt/py/bin/python",
       {"--run-path"},
       [](const LaunchCommand& c) {
         EXPECT_THAT(c.config.program, ElementsAre("/opt/py/bin/python", "-u",
                                                   "-c", _, "train.exe"));
       }},
  };
}

TEST(LaunchFlagsTest, EveryFlagInBothSpellingsAndBothForms) {
  for (const FlagCase& fc : AllFlagCases()) {
    const std::string underscore = absl::StrReplaceAll(fc.flag, {{"-", "_"}});
    for (const std::string& name : {fc.flag, underscore}) {
      std::vector<Args> forms;
      if (fc.value.empty()) {
        forms.push_back({"--" + name});
      } else {
        forms.push_back({absl::StrCat("--", name, "=", fc.value)});
        forms.push_back({"--" + name, fc.value});
      }
      for (const Args& form : forms) {
        SCOPED_TRACE(absl::StrJoin(form, " "));
        fc.check(ParseOk(With(With(fc.extra, form), {"train.exe"})));
      }
    }
  }
}

TEST(LaunchFlagsTest, EveryFlagFromPetEnvironment) {
  for (const FlagCase& fc : AllFlagCases()) {
    const std::string var = "PET_" + absl::AsciiStrToUpper(absl::StrReplaceAll(
                                         fc.flag, {{"-", "_"}}));
    SCOPED_TRACE(var);
    fc.check(ParseOk(With(fc.extra, {"train.exe"}),
                     {{var, fc.value.empty() ? "1" : fc.value}}));
  }
}

TEST(LaunchFlagsTest, ShortSpellings) {
  EXPECT_THAT(ParseOk({"-m", "pkg.train", "--lr", "1"}).config.program,
              ElementsAre("python3", "-u", "-m", "pkg.train", "--lr", "1"));
  EXPECT_EQ(ParseOk({"-r", "1", "x"}).config.redirects,
            (std::map<int, int>{{-1, 1}}));
  EXPECT_EQ(ParseOk({"-r2", "x"}).config.redirects,
            (std::map<int, int>{{-1, 2}}));
  EXPECT_EQ(ParseOk({"-t", "3", "x"}).config.tees,
            (std::map<int, int>{{-1, 3}}));
  EXPECT_EQ(ParseOk({"-t3", "x"}).config.tees, (std::map<int, int>{{-1, 3}}));
}

TEST(LaunchFlagsTest, KubeflowEnvironment) {
  LaunchCommand c = ParseOk({"train.py"}, {{"PET_NNODES", "2"},
                                           {"PET_NPROC_PER_NODE", "4"},
                                           {"PET_NODE_RANK", "1"},
                                           {"PET_MASTER_ADDR", "job-master-0"},
                                           {"PET_MASTER_PORT", "23456"}});
  EXPECT_EQ(c.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(c.config.max_nodes, 2);
  EXPECT_EQ(c.config.nproc_per_node, 4);
  EXPECT_EQ(c.config.node_rank, 1);
  EXPECT_EQ(c.config.master_addr, "job-master-0");
  EXPECT_EQ(c.config.master_port, 23456);
  EXPECT_EQ(c.config.rdzv_endpoint, "job-master-0:29400");
  EXPECT_FALSE(c.config.embed_server);

  LaunchCommand d =
      ParseOk({"train.py"}, {{"PET_RDZV_ENDPOINT", "etcd-svc:2379"},
                             {"PET_RDZV_BACKEND", "c10d"},
                             {"PET_RDZV_ID", "pj"},
                             {"PET_MAX_RESTARTS", "2"},
                             {"PET_NNODES", "1:3"}});
  EXPECT_EQ(d.config.mode, RendezvousMode::kDynamic);
  EXPECT_EQ(d.config.rdzv_endpoint, "etcd-svc:2379");
  EXPECT_EQ(d.config.run_id, "pj");
  EXPECT_EQ(d.config.max_restarts, 2);
  EXPECT_EQ(d.config.max_nodes, 3);
}

TEST(LaunchFlagsTest, CommandLineWinsOverPetEnvironment) {
  Env env = {{"PET_NPROC_PER_NODE", "4"},
             {"PET_MAX_RESTARTS", "9"},
             {"PET_ROLE", "env"}};
  LaunchCommand c = ParseOk({"--nproc_per_node=2", "--role", "cli", "x"}, env);
  EXPECT_EQ(c.config.nproc_per_node, 2);
  EXPECT_EQ(c.config.role, "cli");
  EXPECT_EQ(c.config.max_restarts,
            9);  // not on the command line: from the environment
}

TEST(LaunchFlagsTest, EmptyPetVariableCountsAsUnset) {
  LaunchCommand c =
      ParseOk({"x"}, {{"PET_NNODES", ""}, {"PET_RDZV_ENDPOINT", ""}});
  EXPECT_EQ(c.config.mode, RendezvousMode::kStandalone);
}

TEST(LaunchFlagsTest, BadPetVariableIsNamed) {
  EXPECT_EQ(ParseError({"x"}, {{"PET_NPROC_PER_NODE", "many"}}),
            "PET_NPROC_PER_NODE=many: expected a number, \"auto\", \"cpu\" or "
            "\"gpu\"");
  EXPECT_THAT(ParseError({"x"}, {{"PET_STANDALONE", "maybe"}}),
              HasSubstr("PET_STANDALONE=maybe"));
}

TEST(LaunchFlagsTest, RepeatedFlagTakesTheLastValue) {
  EXPECT_EQ(ParseOk({"--nproc-per-node=2", "--nproc_per_node", "5", "x"})
                .config.nproc_per_node,
            5);
}

TEST(LaunchFlagsTest, DefaultsAreTorchrunsAndMusters) {
  LaunchCommand c = ParseOk({"./train"});
  const AgentConfig& cfg = c.config;
  EXPECT_EQ(cfg.nproc_per_node, 1);
  EXPECT_EQ(cfg.min_nodes, 1);
  EXPECT_EQ(cfg.max_nodes, 1);
  EXPECT_EQ(cfg.max_restarts, 0);
  EXPECT_EQ(cfg.role, "default");
  EXPECT_EQ(cfg.join_timeout, absl::Seconds(600));
  EXPECT_EQ(cfg.heartbeat_interval, absl::Milliseconds(250));
  EXPECT_EQ(cfg.heartbeat_max_missed, 4);
  EXPECT_TRUE(cfg.redirects.empty());
  EXPECT_TRUE(cfg.tees.empty());
  EXPECT_TRUE(cfg.local_ranks_filter.empty());
  EXPECT_THAT(cfg.program, ElementsAre("./train"));
  EXPECT_THAT(c.warnings, IsEmpty());
}

// --- modes
// --------------------------------------------------------------------------------------

bool LooksLikeUuid(const std::string& s) {
  return std::regex_match(s, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-["
                                        "89ab][0-9a-f]{3}-[0-9a-f]{12}"));
}

TEST(LaunchFlagsTest, StandaloneFlag) {
  LaunchCommand c = ParseOk({"--standalone", "--nproc-per-node=4", "train.py"});
  const AgentConfig& cfg = c.config;
  EXPECT_EQ(cfg.mode, RendezvousMode::kStandalone);
  EXPECT_EQ(cfg.min_nodes, 1);
  EXPECT_EQ(cfg.max_nodes, 1);
  EXPECT_EQ(cfg.node_rank, 0);
  EXPECT_TRUE(cfg.embed_server);
  EXPECT_FALSE(cfg.embed_if_local);
  EXPECT_EQ(cfg.embed_listen, "127.0.0.1:0");
  EXPECT_EQ(cfg.rdzv_endpoint, "");
  EXPECT_TRUE(LooksLikeUuid(cfg.run_id)) << cfg.run_id;
  EXPECT_NE(cfg.run_id, ParseOk({"--standalone", "x"}).config.run_id);
  EXPECT_THAT(c.warnings, IsEmpty());
}

TEST(LaunchFlagsTest, StandaloneKeepsAGivenRunIdAndWarnsAboutIgnoredFlags) {
  LaunchCommand c = ParseOk({"--standalone", "--rdzv-id=mine", "--nnodes=2",
                             "--rdzv-endpoint=h:1", "--master-port=5", "x"});
  EXPECT_EQ(c.config.run_id, "mine");
  EXPECT_EQ(c.config.max_nodes, 1);
  EXPECT_EQ(c.config.rdzv_endpoint, "");
  EXPECT_EQ(c.config.master_port, -1);
  ASSERT_EQ(c.warnings.size(), 3u);
  EXPECT_THAT(c.warnings[0], HasSubstr("ignoring --nnodes=2"));
  EXPECT_THAT(c.warnings[1], HasSubstr("ignoring --rdzv-endpoint=h:1"));
  EXPECT_THAT(c.warnings[2], HasSubstr("--master-addr/--master-port"));
}

TEST(LaunchFlagsTest, SingleNodeWithoutEndpointBehavesAsStandalone) {
  for (const Args& args : {Args{"x"}, Args{"--nnodes=1", "x"},
                           Args{"--nnodes=1", "--node-rank=0", "x"},
                           Args{"--rdzv-backend=c10d", "x"}}) {
    SCOPED_TRACE(absl::StrJoin(args, " "));
    LaunchCommand c = ParseOk(args);
    EXPECT_EQ(c.config.mode, RendezvousMode::kStandalone);
    EXPECT_TRUE(c.config.embed_server);
    EXPECT_EQ(c.config.embed_listen, "127.0.0.1:0");
    EXPECT_EQ(c.config.node_rank, 0);
    // torchrun's TORCHELASTIC_RUN_ID without --standalone and --rdzv-id.
    EXPECT_EQ(c.config.run_id, "none");
  }
  EXPECT_EQ(ParseOk({"--rdzv-id=abc", "x"}).config.run_id, "abc");
}

TEST(LaunchFlagsTest, StaticRankZeroEmbedsTheServer) {
  LaunchCommand c =
      ParseOk({"--nnodes=2", "--node-rank=0", "--master-addr=10.0.0.1",
               "--master-port=29501", "x"});
  const AgentConfig& cfg = c.config;
  ExpectStaticLayout(cfg, {.master_addr = "10.0.0.1",
                           .master_port = 29501,
                           .rdzv_endpoint = "10.0.0.1:29400",
                           .nodes = 2,
                           .node_rank = 0,
                           .embed_server = true});
  EXPECT_FALSE(cfg.embed_if_local);
  EXPECT_EQ(cfg.embed_listen, "0.0.0.0:29400");
  EXPECT_EQ(cfg.run_id, "none");
  EXPECT_THAT(c.warnings, IsEmpty());
}

TEST(LaunchFlagsTest, StaticOtherRanksJoin) {
  LaunchCommand c =
      ParseOk({"--nnodes=3", "--node-rank=2", "--master-addr=node0", "x"});
  EXPECT_EQ(c.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(c.config.node_rank, 2);
  EXPECT_EQ(c.config.master_port, 29500);
  EXPECT_EQ(c.config.rdzv_endpoint, "node0:29400");
  EXPECT_FALSE(c.config.embed_server);
  EXPECT_EQ(c.config.embed_listen, "");
}

TEST(LaunchFlagsTest, StaticServerPortFromRdzvEndpoint) {
  LaunchCommand c =
      ParseOk({"--rdzv-backend=static", "--rdzv-endpoint=:29555", "--nnodes=2",
               "--node-rank=0", "--master-addr=10.0.0.1", "x"});
  EXPECT_EQ(c.config.rdzv_endpoint, "10.0.0.1:29555");
  EXPECT_EQ(c.config.embed_listen, "0.0.0.0:29555");
  // torchrun's static backend at an endpoint: its host stands in for
  // --master-addr.
  LaunchCommand d =
      ParseOk({"--rdzv-backend=static", "--rdzv-endpoint=node0:29555",
               "--nnodes=2", "--node-rank=1", "x"});
  EXPECT_EQ(d.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(d.config.master_addr, "node0");
  EXPECT_EQ(d.config.rdzv_endpoint, "node0:29555");
  EXPECT_THAT(d.warnings, IsEmpty());
}

TEST(LaunchFlagsTest, MasterAddrWithEndpointAndNoBackendIsStatic) {
  // torchrun's default backend is static: the endpoint only moves the port.
  LaunchCommand c =
      ParseOk({"--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1",
               "--master-port=29611", "--rdzv-endpoint=127.0.0.1:29612", "x"});
  EXPECT_EQ(c.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(c.config.master_port, 29611);
  EXPECT_EQ(c.config.rdzv_endpoint, "127.0.0.1:29612");
  EXPECT_FALSE(c.config.embed_server);
  EXPECT_THAT(c.warnings, IsEmpty());
  // An elastic node count or a named dynamic backend keeps it dynamic.
  for (const Args& args :
       {Args{"--nnodes=1:2", "--master-addr=m", "--rdzv-endpoint=h"},
        Args{"--nnodes=2", "--rdzv-backend=c10d", "--master-addr=m",
             "--rdzv-endpoint=h"}}) {
    LaunchCommand d = ParseOk(With(args, {"--rdzv-id=j", "x"}));
    EXPECT_EQ(d.config.mode, RendezvousMode::kDynamic);
    EXPECT_EQ(d.config.master_addr, "");
    ASSERT_EQ(d.warnings.size(), 1u);
    EXPECT_THAT(d.warnings[0], HasSubstr("apply to static rendezvous only"));
  }
}

TEST(LaunchFlagsTest, StaticWhenMasterGivenOnOneNode) {
  LaunchCommand a = ParseOk({"--master-addr=10.0.0.5", "x"});
  EXPECT_EQ(a.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(a.config.node_rank, 0);
  EXPECT_TRUE(a.config.embed_server);
  LaunchCommand p = ParseOk({"--master-port=29700", "x"});
  EXPECT_EQ(p.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(p.config.master_addr, "127.0.0.1");
  EXPECT_EQ(p.config.master_port, 29700);
  EXPECT_EQ(p.config.rdzv_endpoint, "127.0.0.1:29400");
}

TEST(LaunchFlagsTest, StaticMultiNodeWithoutMasterAddrWarns) {
  LaunchCommand c = ParseOk({"--nnodes=2", "--node-rank=1", "x"});
  EXPECT_EQ(c.config.mode, RendezvousMode::kStatic);
  EXPECT_EQ(c.config.master_addr, "127.0.0.1");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("--master-addr"));
}

TEST(LaunchFlagsTest, StaticErrors) {
  EXPECT_EQ(
      ParseError({"--nnodes=2", "--master-addr=h", "x"}),
      "static rendezvous with --nnodes=2 needs --node-rank=0..1 on each node");
  EXPECT_THAT(ParseError({"--rdzv-backend=static", "--nnodes=1:2",
                          "--node-rank=0", "x"}),
              HasSubstr("static rendezvous needs a fixed node count"));
  EXPECT_EQ(ParseError({"--nnodes=2", "--node-rank=2", "--master-addr=h", "x"}),
            "--node-rank=2: with --nnodes=2 node ranks are 0..1");
  EXPECT_THAT(
      ParseError({"--nnodes=2", "--node-rank=0", "--master-port=29400", "x"}),
      HasSubstr(
          "--master-port=29400: that is also the rendezvous server's port"));
  EXPECT_THAT(ParseError({"--node-rank=1", "x"}),
              HasSubstr("node ranks are 0..0"));
}

TEST(LaunchFlagsTest, ElasticWithoutEndpointIsAnError) {
  EXPECT_THAT(
      ParseError({"--nnodes=1:4", "x"}),
      HasSubstr("--nnodes=1:4 is elastic and needs a rendezvous server"));
  EXPECT_EQ(ParseError({"--rdzv-backend=c10d", "--nnodes=2", "x"}),
            "--rdzv-backend=c10d needs --rdzv-endpoint=HOST[:PORT] (the "
            "rendezvous server, port 29400 by default)");
}

TEST(LaunchFlagsTest, DynamicEmbedsWhenLocal) {
  LaunchCommand c = ParseOk({"--nnodes=1:4", "--rdzv-backend=c10d",
                             "--rdzv-endpoint=node0", "--rdzv-id=j", "x"});
  const AgentConfig& cfg = c.config;
  EXPECT_EQ(cfg.mode, RendezvousMode::kDynamic);
  EXPECT_EQ(cfg.rdzv_endpoint, "node0:29400");
  EXPECT_FALSE(cfg.embed_server);
  EXPECT_TRUE(cfg.embed_if_local);
  EXPECT_EQ(cfg.embed_listen, "0.0.0.0:29400");
  EXPECT_EQ(cfg.node_rank, -1);
  EXPECT_EQ(cfg.master_addr, "");
  EXPECT_EQ(cfg.master_port, -1);
  EXPECT_EQ(cfg.run_id, "j");
  EXPECT_THAT(c.warnings, IsEmpty());
}

TEST(LaunchFlagsTest, DynamicIsHost) {
  LaunchCommand on = ParseOk({"--rdzv-endpoint=[::1]:5000",
                              "--rdzv-conf=is_host=1", "--rdzv-id=j", "x"});
  EXPECT_TRUE(on.config.embed_server);
  EXPECT_FALSE(on.config.embed_if_local);
  EXPECT_EQ(on.config.embed_listen, "[::]:5000");
  EXPECT_EQ(on.config.rdzv_endpoint, "[::1]:5000");
  for (const char* no : {"is_host=0", "is_host=false", "is_host=False"}) {
    LaunchCommand off =
        ParseOk({"--rdzv-endpoint=h:5000", absl::StrCat("--rdzv-conf=", no),
                 "--rdzv-id=j", "x"});
    EXPECT_FALSE(off.config.embed_server) << no;
    EXPECT_FALSE(off.config.embed_if_local) << no;
  }
  EXPECT_TRUE(ParseOk({"--rdzv-endpoint=h", "--rdzv-conf=is_host=True", "x"})
                  .config.embed_server);
}

// Issue 25: --rdzv-endpoint lists musterd replicas; the agent always joins
// (no embedded server) and gets the replicated lease unless one is given.
TEST(LaunchFlagsTest, ReplicasJoinAlwaysWithTheReplicatedLease) {
  LaunchCommand c =
      ParseOk({"--nnodes=1:4", "--rdzv-endpoint=h1:1, h2 ,[::1]:3",
               "--rdzv-id=j", "x"});
  EXPECT_EQ(c.config.mode, RendezvousMode::kDynamic);
  EXPECT_EQ(c.config.rdzv_endpoint, "h1:1,h2:29400,[::1]:3");
  EXPECT_FALSE(c.config.embed_server);
  EXPECT_FALSE(c.config.embed_if_local);
  EXPECT_EQ(c.config.embed_listen, "");
  EXPECT_EQ(c.config.lease_timeout, rendezvous::kDefaultReplicatedLease);
  EXPECT_THAT(c.warnings, IsEmpty());
  // PET_RDZV_ENDPOINT too; a lease given is kept; is_host=0 is harmless.
  LaunchCommand env = ParseOk({"--rdzv-conf=lease_timeout=4,is_host=0", "x"},
                              {{"PET_RDZV_ENDPOINT", "a:1,b:2"},
                               {"PET_RDZV_ID", "j"},
                               {"PET_NNODES", "1:2"}});
  EXPECT_EQ(env.config.rdzv_endpoint, "a:1,b:2");
  EXPECT_EQ(env.config.lease_timeout, absl::Seconds(4));
  // One endpoint: as before (the single-musterd lease, the is_host guess).
  LaunchCommand one = ParseOk({"--rdzv-endpoint=h1:1", "--rdzv-id=j", "x"});
  EXPECT_EQ(one.config.lease_timeout, rendezvous::kDefaultLease);
  EXPECT_TRUE(one.config.embed_if_local);
  // ... unless the name turns out to have several addresses (the agent
  // counts them at start-up), when no lease_timeout was given.
  EXPECT_TRUE(one.config.replicated_lease_default);
  EXPECT_FALSE(ParseOk({"--rdzv-endpoint=h1:1", "--rdzv-id=j",
                        "--rdzv-conf=lease_timeout=5", "x"})
                   .config.replicated_lease_default);
}

TEST(LaunchFlagsTest, BadReplicaListsNamed) {
  EXPECT_THAT(ParseError({"--rdzv-endpoint=h1:1,,h2:2", "x"}),
              HasSubstr("entry 2 is empty"));
  EXPECT_THAT(ParseError({"--rdzv-endpoint=h1:1,h2:x", "x"}),
              HasSubstr("entry 2: address 'h2:x' has port 'x'"));
  EXPECT_THAT(ParseError({"--rdzv-endpoint=h1:1,:2", "x"}),
              HasSubstr("entry 2 (':2') has no host"));
  EXPECT_THAT(ParseError({"--rdzv-endpoint=h1:1,h1:1", "x"}),
              HasSubstr("h1:1 is listed twice"));
  EXPECT_THAT(ParseError({"--rdzv-endpoint=h1:1,h2:2", "--rdzv-conf=is_host=1",
                          "--rdzv-id=j", "x"}),
              HasSubstr("an agent cannot host"));
  EXPECT_THAT(ParseError({"--rdzv-backend=static", "--rdzv-endpoint=h1:1,h2:2",
                          "--nnodes=2", "--node-rank=0", "x"}),
              HasSubstr("static rendezvous runs its server on node rank 0"));
}

TEST(LaunchFlagsTest, DynamicNodeRankIsAHintAndMasterIsIgnored) {
  LaunchCommand c =
      ParseOk({"--nnodes=2:4", "--rdzv-endpoint=h", "--node-rank=3",
               "--master-addr=m", "--master-port=1234", "x"});
  EXPECT_EQ(c.config.mode, RendezvousMode::kDynamic);
  EXPECT_EQ(c.config.node_rank, 3);
  EXPECT_EQ(c.config.master_addr, "");
  EXPECT_EQ(c.config.master_port, -1);
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_THAT(c.warnings[0],
              HasSubstr("--master-addr/--master-port apply to static"));
  EXPECT_THAT(c.warnings[1], HasSubstr("no --rdzv-id"));
}

TEST(LaunchFlagsTest, RdzvBackends) {
  for (const char* ok : {"c10d", "muster", "C10D"}) {
    LaunchCommand c = ParseOk({absl::StrCat("--rdzv-backend=", ok),
                               "--rdzv-endpoint=h", "--rdzv-id=j", "x"});
    EXPECT_EQ(c.config.mode, RendezvousMode::kDynamic) << ok;
    EXPECT_THAT(c.warnings, IsEmpty()) << ok;
  }
  for (const char* etcd : {"etcd", "etcd-v2"}) {
    LaunchCommand c = ParseOk({absl::StrCat("--rdzv-backend=", etcd),
                               "--rdzv-endpoint=h:2379", "--rdzv-id=j", "x"});
    EXPECT_EQ(c.config.mode, RendezvousMode::kDynamic);
    EXPECT_EQ(c.config.rdzv_endpoint, "h:2379");
    ASSERT_EQ(c.warnings.size(), 1u);
    EXPECT_THAT(c.warnings[0], HasSubstr("muster has no etcd backend"));
  }
  EXPECT_THAT(
      ParseError({"--rdzv-backend=zookeeper", "x"}),
      HasSubstr("--rdzv-backend=zookeeper: expected c10d, static or muster"));
}

// --- values
// -------------------------------------------------------------------------------------

TEST(LaunchFlagsTest, NprocWords) {
  HostResources four_gpus;
  four_gpus.cpus = 64;
  four_gpus.gpus = 4;
  EXPECT_EQ(ParseOk({"--nproc-per-node=auto", "x"}).config.nproc_per_node, 8);
  EXPECT_EQ(ParseOk({"--nproc-per-node=auto", "x"}, {}, four_gpus)
                .config.nproc_per_node,
            4);
  EXPECT_EQ(ParseOk({"--nproc-per-node=cpu", "x"}, {}, four_gpus)
                .config.nproc_per_node,
            64);
  EXPECT_EQ(ParseOk({"--nproc-per-node=gpu", "x"}, {}, four_gpus)
                .config.nproc_per_node,
            4);
  EXPECT_EQ(ParseOk({"--nproc-per-node=GPU", "x"}, {}, four_gpus)
                .config.nproc_per_node,
            4);
  EXPECT_THAT(ParseError({"--nproc-per-node=gpu", "x"}),
              HasSubstr("--nproc-per-node=gpu: no NVIDIA GPU found"));
  EXPECT_THAT(ParseError({"--nproc-per-node=gpu", "x"}),
              HasSubstr("\"cpu\" or \"auto\""));
}

TEST(LaunchFlagsTest, MalformedNproc) {
  EXPECT_EQ(
      ParseError({"--nproc-per-node=abc", "x"}),
      "--nproc-per-node=abc: expected a number, \"auto\", \"cpu\" or \"gpu\"");
  EXPECT_THAT(ParseError({"--nproc_per_node", "0", "x"}),
              HasSubstr("--nproc-per-node=0: at least 1 worker per node"));
  EXPECT_THAT(ParseError({"--nproc-per-node=-2", "x"}),
              HasSubstr("--nproc-per-node=-2"));
  // An empty value is an error, not "take the next argument" (the program).
  EXPECT_EQ(ParseError({"--nproc-per-node=", "x"}),
            "--nproc-per-node=: expected a value (N|auto|cpu|gpu)");
  EXPECT_EQ(ParseError({"--nproc_per_node=", "x"}),
            "--nproc-per-node=: expected a value (N|auto|cpu|gpu)");
  // After the program it is the program's business.
  EXPECT_THAT(ParseOk({"x", "--nnodes="}).config.program,
              ElementsAre("x", "--nnodes="));
}

TEST(LaunchFlagsTest, MalformedNnodes) {
  for (const char* bad : {"abc", "1:2:3", "2:", ":2", "1.5"}) {
    EXPECT_THAT(
        ParseError({absl::StrCat("--nnodes=", bad), "x"}),
        HasSubstr(absl::StrCat("--nnodes=", bad, ": expected N or MIN:MAX")))
        << bad;
  }
  EXPECT_EQ(ParseError({"--nnodes=", "x"}),
            "--nnodes=: expected a value (N|MIN:MAX)");
  EXPECT_THAT(ParseError({"--nnodes=0", "x"}), HasSubstr("at least 1 node"));
  EXPECT_THAT(ParseError({"--nnodes=0:2", "x"}), HasSubstr("at least 1 node"));
  EXPECT_THAT(ParseError({"--nnodes=4:2", "x"}),
              HasSubstr("--nnodes=4:2: MAX (2) is below MIN (4)"));
}

TEST(LaunchFlagsTest, MalformedPortsAndAddresses) {
  for (const char* bad : {"0", "65536", "abc", "-1"}) {
    EXPECT_THAT(
        ParseError({absl::StrCat("--master-port=", bad), "x"}),
        HasSubstr(absl::StrCat("--master-port=", bad,
                               ": expected a port number in 1..65535")));
  }
  EXPECT_THAT(
      ParseError({"--rdzv-endpoint=h:abc", "x"}),
      HasSubstr("--rdzv-endpoint=h:abc: address 'h:abc' has port 'abc'"));
  // Port 0 is a free port of the server this node embeds
  // (RdzvEndpointPortZero).
  EXPECT_THAT(ParseError({"--rdzv-endpoint=h:0", "--rdzv-conf=is_host=0", "x"}),
              HasSubstr("--rdzv-endpoint=h:0: port 0 means"));
  EXPECT_THAT(ParseError({"--rdzv-endpoint=:29400", "x"}),
              HasSubstr("needs the host"));
  EXPECT_THAT(ParseError({"--master-addr=node0:29500", "x"}),
              HasSubstr("--master-addr=node0:29500: give the host alone"));
  // An IPv6 master address is not mistaken for host:port.
  EXPECT_EQ(ParseOk({"--master-addr=fe80::1", "x"}).config.master_addr,
            "fe80::1");
}

TEST(LaunchFlagsTest, OtherMalformedValues) {
  EXPECT_THAT(ParseError({"--max-restarts=-1", "x"}),
              HasSubstr("--max-restarts=-1: expected"));
  EXPECT_THAT(ParseError({"--node-rank=x", "x"}),
              HasSubstr("--node-rank=x: expected"));
  EXPECT_THAT(ParseError({"--monitor-interval=0", "x"}),
              HasSubstr("--monitor-interval=0"));
  EXPECT_THAT(
      ParseError({"--start-method=thread", "x"}),
      HasSubstr("--start-method=thread: expected spawn, fork or forkserver"));
  EXPECT_THAT(ParseError({"--rdzv-id=a/b", "x"}), HasSubstr("--rdzv-id 'a/b'"));
  EXPECT_THAT(ParseError({"--role", " ", "x"}),
              HasSubstr("--role= : expected a role name"));
  EXPECT_THAT(ParseError({"--role=", "x"}),
              HasSubstr("--role=: expected a value (NAME)"));
  EXPECT_THAT(ParseError({"--local-ranks-filter=0,x", "x"}),
              HasSubstr("--local-ranks-filter=0,x: expected local ranks"));
  EXPECT_THAT(ParseError({"--standalone=maybe", "x"}),
              HasSubstr("--standalone=maybe"));
}

// Issue 11: the launcher checks the server's id grammar (muster/common/ids.h)
// before it connects, naming the grammar and the fix.
TEST(LaunchFlagsTest, RdzvIdFollowsTheServersGrammar) {
  for (const std::string& bad :
       {std::string("a/b"), std::string("a b"), std::string("job\\1"),
        std::string(129, 'x'), std::string("caf\xc3\xa9")}) {
    const std::string error = ParseError({"--rdzv-id=" + bad, "x"});
    EXPECT_THAT(error, HasSubstr("--rdzv-id")) << bad;
    EXPECT_THAT(error, HasSubstr("[A-Za-z0-9._-]{1,128}")) << bad;
    EXPECT_THAT(error, HasSubstr("--rdzv-id=job-42")) << bad;
  }
  EXPECT_THAT(ParseError({"x"}, {{"PET_RDZV_ID", "x/y"}}),
              HasSubstr("PET_RDZV_ID 'x/y'"));
  EXPECT_THAT(ParseError({"--rdzv-id=..", "x"}), HasSubstr("'..'"));
  EXPECT_EQ(ParseOk({"--rdzv-id=" + std::string(128, 'x'), "x"}).config.run_id,
            std::string(128, 'x'));
  EXPECT_EQ(ParseOk({"--rdzv-id=Job_4.2-a", "x"}).config.run_id, "Job_4.2-a");
}

TEST(LaunchFlagsTest, DiagnosticsFlags) {
  const AgentConfig defaults = ParseOk({"x"}).config;
  EXPECT_TRUE(defaults.preflight);
  EXPECT_EQ(defaults.worker_timeout, absl::ZeroDuration());
  EXPECT_EQ(defaults.health_port, -1);
  const AgentConfig c =
      ParseOk({"--no-preflight", "--worker_timeout=2.5", "--health-port=9401",
               "--rdzv-conf=preflight_timeout=0.5", "x"})
          .config;
  EXPECT_FALSE(c.preflight);
  EXPECT_EQ(c.worker_timeout, absl::Milliseconds(2500));
  EXPECT_EQ(c.health_port, 9401);
  EXPECT_EQ(c.preflight_timeout, absl::Milliseconds(500));
  EXPECT_THAT(ParseError({"--worker-timeout=-1", "x"}),
              HasSubstr("--worker-timeout=-1"));
  EXPECT_THAT(ParseError({"--health-port=70000", "x"}),
              HasSubstr("--health-port=70000"));
}

TEST(LaunchFlagsTest, RdzvConf) {
  LaunchCommand c = ParseOk(
      {"--rdzv-endpoint=h", "--rdzv-id=j",
       "--rdzv-conf=join_timeout=900,last_call_timeout=0.5,close_timeout=2,"
       "read_timeout=7,connect_timeout=1.5,keep_alive_interval=5,keep_"
       "alive_max_attempt=3,is_host=0",
       "x"});
  const AgentConfig& cfg = c.config;
  EXPECT_EQ(cfg.join_timeout, absl::Seconds(900));
  EXPECT_EQ(cfg.last_call_timeout, absl::Milliseconds(500));
  EXPECT_EQ(cfg.close_timeout, absl::Seconds(2));
  EXPECT_EQ(cfg.read_timeout, absl::Seconds(7));
  EXPECT_EQ(cfg.connect_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(cfg.heartbeat_interval, absl::Seconds(5));
  EXPECT_TRUE(cfg.heartbeat_interval_fixed)
      << "a keep_alive_interval the user set is not the server's to change";
  EXPECT_EQ(cfg.heartbeat_max_missed, 3);
  EXPECT_FALSE(cfg.embed_if_local);
  EXPECT_EQ(ParseOk({"--rdzv-conf=join_timeout=30,", "x"}).config.join_timeout,
            absl::Seconds(30));
  EXPECT_FALSE(ParseOk({"--rdzv-conf=join_timeout=30,", "x"})
                   .config.heartbeat_interval_fixed)
      << "without keep_alive_interval the agent follows musterd's budget";
  EXPECT_EQ(ParseOk({"--rdzv-conf=reconnect_timeout=2.5", "x"})
                .config.reconnect_timeout,
            absl::Milliseconds(2500));
  EXPECT_EQ(
      ParseOk({"--rdzv-conf=join_timeout=250ms", "x"}).config.join_timeout,
      absl::Milliseconds(250));
}

TEST(LaunchFlagsTest, UnknownRdzvConfKeysAreWarnings) {
  // torchrun's own keys (use_libuv, store_type) must not stop a command line
  // that runs under torchrun; a typo is named with the key it resembles.
  LaunchCommand c =
      ParseOk({"--rdzv-conf=use_libuv=1,join_timout=5,join_timeout=7", "x"});
  EXPECT_EQ(c.config.join_timeout, absl::Seconds(7));
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_THAT(c.warnings[0], HasSubstr("ignoring key 'use_libuv'"));
  EXPECT_THAT(c.warnings[1], HasSubstr("ignoring key 'join_timout' (did you "
                                       "mean join_timeout?)"));
  const std::string& unknown = c.warnings[1];
  for (const char* key :
       {"join_timeout", "last_call_timeout", "close_timeout", "read_timeout",
        "connect_timeout", "reconnect_timeout", "keep_alive_interval",
        "keep_alive_max_attempt", "is_host"}) {
    EXPECT_THAT(unknown, HasSubstr(key));
  }
}

TEST(LaunchFlagsTest, MalformedRdzvConf) {
  EXPECT_THAT(ParseError({"--rdzv-conf=join_timeout=abc", "x"}),
              HasSubstr("join_timeout=abc: expected seconds > 0"));
  EXPECT_THAT(ParseError({"--rdzv-conf=join_timeout=0", "x"}),
              HasSubstr("expected seconds > 0"));
  EXPECT_THAT(ParseError({"--rdzv-conf=read_timeout=-1", "x"}),
              HasSubstr("read_timeout=-1"));
  EXPECT_THAT(ParseError({"--rdzv-conf=join_timeout", "x"}),
              HasSubstr("is not KEY=VALUE"));
  EXPECT_THAT(ParseError({"--rdzv-conf=is_host=maybe", "x"}),
              HasSubstr("is_host=maybe: expected true, false, 1 or 0"));
  EXPECT_THAT(ParseError({"--rdzv-conf=keep_alive_max_attempt=0", "x"}),
              HasSubstr("keep_alive_max_attempt=0"));
  EXPECT_THAT(ParseError({"--rdzv-conf=keep_alive_interval=0", "x"}),
              HasSubstr("keep_alive_interval=0"));
}

// Issue 11: out-of-range numbers are refused at once, naming the range.
TEST(LaunchFlagsTest, NumbersAndDurationsHaveBounds) {
  EXPECT_THAT(ParseError({"--nproc-per-node=2147483647", "x"}),
              HasSubstr("at most 4096 workers per node"));
  EXPECT_EQ(ParseOk({"--nproc-per-node=4096", "x"}).config.nproc_per_node,
            4096);
  EXPECT_THAT(ParseError({"--rdzv-conf=keep_alive_interval=1e-9", "x"}),
              HasSubstr("keep_alive_interval=1e-9 is out of range: expected "
                        "seconds from 10ms to 1m"));
  EXPECT_THAT(ParseError({"--rdzv-conf=keep_alive_interval=3600", "x"}),
              HasSubstr("out of range"));
  EXPECT_THAT(ParseError({"--rdzv-conf=join_timeout=1e12", "x"}),
              HasSubstr("join_timeout=1e12 is out of range"));
  EXPECT_THAT(ParseError({"--rdzv-conf=join_timeout=nan", "x"}),
              HasSubstr("join_timeout=nan"));
  EXPECT_THAT(ParseError({"--rdzv-conf=read_timeout=inf", "x"}),
              HasSubstr("read_timeout=inf"));
  EXPECT_THAT(ParseError({"--rdzv-conf=keep_alive_max_attempt=100000", "x"}),
              HasSubstr("from 1 to 1000"));
  EXPECT_THAT(ParseError({"--monitor-interval=1e-9", "x"}),
              HasSubstr("from 0.001 to 3600"));
  // Zero stays a valid "at once" where it was.
  EXPECT_EQ(ParseOk({"--rdzv-conf=last_call_timeout=0", "x"})
                .config.last_call_timeout,
            absl::ZeroDuration());
  EXPECT_EQ(ParseOk({"--rdzv-conf=keep_alive_interval=0.01", "x"})
                .config.heartbeat_interval,
            absl::Milliseconds(10));
}

TEST(LaunchFlagsTest, RedirectAndTeeMaps) {
  EXPECT_EQ(ParseOk({"--redirects=0", "x"}).config.redirects,
            (std::map<int, int>{}));
  EXPECT_EQ(ParseOk({"--redirects=3", "x"}).config.redirects,
            (std::map<int, int>{{-1, 3}}));
  EXPECT_EQ(ParseOk({"--nproc-per-node=3", "--redirects=0:1,1:2,2:0", "x"})
                .config.redirects,
            (std::map<int, int>{{0, 1}, {1, 2}}));
  EXPECT_EQ(ParseOk({"--nproc-per-node=2", "-t", "0:3, 1:1", "x"}).config.tees,
            (std::map<int, int>{{0, 3}, {1, 1}}));
  for (const char* bad : {"4", "-1", "0:4", "a:1", "0:1:2", "x"}) {
    EXPECT_THAT(
        ParseError({absl::StrCat("--redirects=", bad), "x"}),
        HasSubstr(absl::StrCat("--redirects=", bad, ": expected 0 (none)")))
        << bad;
    EXPECT_THAT(ParseError({absl::StrCat("--tee=", bad), "x"}),
                HasSubstr(absl::StrCat("--tee=", bad, ": expected 0 (none)")))
        << bad;
  }
  LaunchCommand w = ParseOk(
      {"--nproc-per-node=2", "-r", "5:1", "--local-ranks-filter=7", "x"});
  ASSERT_EQ(w.warnings.size(), 2u);
  EXPECT_THAT(w.warnings[0], HasSubstr("local rank 5 does not exist"));
  EXPECT_THAT(w.warnings[1], HasSubstr("local rank 7 does not exist"));
}

// --- torchrun parity (issue 30)
// ---------------------------------------------------------------

// argparse takes any unambiguous prefix of a long flag; PyTorch's own
// test_capture_logs_using_default_logs_specs writes --redirect=3.
TEST(LaunchFlagsTest, UnambiguousAbbreviationsAreTaken) {
  LaunchCommand c = ParseOk({"--redirect=3", "--tee", "3", "x"});
  EXPECT_EQ(c.config.redirects, (std::map<int, int>{{-1, 3}}));
  EXPECT_THAT(c.warnings,
              Contains(HasSubstr("--redirect taken as --redirects")));
  for (const std::string& spelling : std::vector<std::string>{
           "--nproc-per-nod", "--nproc_per_nod", "--nproc"}) {
    SCOPED_TRACE(spelling);
    EXPECT_EQ(ParseOk({spelling + "=4", "x"}).config.nproc_per_node, 4);
    // The value as the next argument is skipped, not taken for PROGRAM.
    LaunchCommand d = ParseOk({spelling, "4", "--standalon", "x", "--nnod"});
    EXPECT_EQ(d.config.nproc_per_node, 4);
    EXPECT_EQ(d.config.mode, RendezvousMode::kStandalone);
    EXPECT_THAT(d.config.program, ElementsAre("x", "--nnod"));
  }
  EXPECT_EQ(ParseOk({"--max_rest=2", "x"}).config.max_restarts, 2);
  // The full name is never an abbreviation: --tee is --tee, not ambiguous.
  EXPECT_THAT(ParseOk({"--tee=1", "x"}).warnings, IsEmpty());
  EXPECT_TRUE(ParseOk({"--hel"}).show_help);
  EXPECT_THAT(ParseError({"--he", "x"}),
              HasSubstr("it abbreviates --health-port, --help"));
}

TEST(LaunchFlagsTest, AmbiguousAbbreviationNamesTheCandidates) {
  EXPECT_EQ(ParseError({"--no", "x"}),
            "ambiguous flag --no: it abbreviates --node-rank, --no-preflight, "
            "--no-python; write more of its name");
  EXPECT_THAT(ParseError({"--rdzv_=1", "x"}),
              HasSubstr("ambiguous flag --rdzv_: it abbreviates "
                        "--rdzv-backend, --rdzv-endpoint, --rdzv-id, "
                        "--rdzv-conf"));
  EXPECT_THAT(ParseError({"--nproc-per-node=2", "--ma", "1", "x"}),
              HasSubstr("ambiguous flag --ma"));
}

// test_launch_elastic's and test_launch_elastic_multiple_agents' --rdzv-conf,
// in both spellings: keys torchrun's c10d backend does not read are ignored.
TEST(LaunchFlagsTest, RdzvConfOfPyTorchsOwnTests) {
  for (const std::string& flag :
       std::vector<std::string>{"--rdzv-conf", "--rdzv_conf"}) {
    SCOPED_TRACE(flag);
    LaunchCommand c = ParseOk(
        {"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
         "--rdzv-endpoint=localhost:29411", "--rdzv-id=r",
         flag + "='join_timeout=5,last_call_timeout=1,timeout=5'", "x"});
    EXPECT_EQ(c.config.last_call_timeout, absl::Seconds(1));
    EXPECT_EQ(c.config.join_timeout, agent::AgentConfig().join_timeout);
    EXPECT_THAT(c.warnings, Contains(HasSubstr("ignoring key 'timeout'")));
    EXPECT_THAT(c.warnings,
                Contains(HasSubstr("ignoring key ''join_timeout'")));
    c = ParseOk({"--nnodes=1:2", "--rdzv-endpoint=localhost:29411",
                 "--rdzv-id=r", flag + "=timeout=5", "x"});
    EXPECT_THAT(c.warnings, Contains(HasSubstr("ignoring key 'timeout'")));
    // With the etcd backend, timeout is read (as torchrun's etcd backend
    // does) and checked.
    EXPECT_THAT(ParseError({"--nnodes=1:2", "--rdzv-backend=etcd",
                            "--rdzv-endpoint=localhost:29411", "--rdzv-id=r",
                            flag + "=timeout=5'", "x"}),
                HasSubstr("timeout=5': expected seconds"));
  }
}

TEST(LaunchFlagsTest, OutputPrefixDefaultsToTorchruns) {
  LaunchCommand c = ParseOk({"--nproc-per-node=2", "x"});
  EXPECT_FALSE(c.config.prefix_output);
  EXPECT_EQ(c.config.log_line_prefix_template, "");
  const Env tmpl = {
      {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]: "}};
  for (const std::string& flag :
       std::vector<std::string>{"--nproc-per-node=2", "--nproc_per_node=2"}) {
    c = ParseOk({flag, "--tee=3", "x"}, tmpl);
    EXPECT_FALSE(c.config.prefix_output);
    EXPECT_EQ(c.config.log_line_prefix_template, "[rank${rank}]: ");
    // The template wins over --prefix-output's own prefix.
    c = ParseOk({flag, "--prefix_output", "x"}, tmpl);
    EXPECT_TRUE(c.config.prefix_output);
    EXPECT_EQ(c.config.log_line_prefix_template, "[rank${rank}]: ");
  }
  // An empty template is none (torchrun: `if template:`).
  EXPECT_EQ(ParseOk({"x"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", ""}})
                .config.log_line_prefix_template,
            "");
}

// test_launch_elastic* use --rdzv-endpoint=localhost:<free port>; port 0 asks
// the server this node embeds to take a free one.
TEST(LaunchFlagsTest, RdzvEndpointPortZero) {
  for (const std::string& flag :
       std::vector<std::string>{"--rdzv-endpoint", "--rdzv_endpoint"}) {
    SCOPED_TRACE(flag);
    LaunchCommand c = ParseOk({"--nnodes=1:2", "--rdzv-backend=c10d",
                               flag + "=localhost:0", "--rdzv-id=j", "x"});
    EXPECT_EQ(c.config.mode, RendezvousMode::kDynamic);
    EXPECT_EQ(c.config.rdzv_endpoint, "localhost:0");
    EXPECT_TRUE(c.config.embed_if_local);
    EXPECT_THAT(ParseError({"--nnodes=1:2", flag + "=localhost:0",
                            "--rdzv-conf=is_host=0", "--rdzv-id=j", "x"}),
                HasSubstr("port 0 means"));
    EXPECT_THAT(ParseError({"--nnodes=2", "--node-rank=0",
                            "--master-addr=127.0.0.1", flag + "=:0", "x"}),
                HasSubstr("port 0 gives node rank 0's server a free port"));
  }
}

// --- unknown flags, help, version
// ---------------------------------------------------------------

TEST(LaunchFlagsTest, UnknownFlagSuggestsTheClosest) {
  EXPECT_EQ(ParseError({"--nproc-per-nodes=4", "x"}),
            "unknown flag --nproc-per-nodes (did you mean --nproc-per-node?)");
  EXPECT_EQ(ParseError({"--nproc_per_nodes", "4", "x"}),
            "unknown flag --nproc_per_nodes (did you mean --nproc_per_node?)");
  EXPECT_EQ(ParseError({"--standalome", "x"}),
            "unknown flag --standalome (did you mean --standalone?)");
  EXPECT_EQ(ParseError({"--rdvz-endpoint=h", "x"}),
            "unknown flag --rdvz-endpoint (did you mean --rdzv-endpoint?)");
  EXPECT_THAT(
      ParseError({"--learning-rate", "0.1", "train.py"}),
      HasSubstr(
          "unknown flag --learning-rate; the program's own flags go after it"));
  EXPECT_THAT(ParseError({"-x", "train.py"}), HasSubstr("unknown flag -x"));
}

TEST(LaunchFlagsTest, FlagWithoutValue) {
  EXPECT_EQ(ParseError({"--nnodes"}), "--nnodes: expected a value (N|MIN:MAX)");
  EXPECT_EQ(ParseError({"--rdzv_conf"}),
            "--rdzv-conf: expected a value (KEY=VALUE,...)");
  EXPECT_EQ(ParseError({"-r"}),
            "-r/--redirects: expected a value (0-3|RANK:0-3,...)");
  EXPECT_THAT(ParseError({"--nnodes", "--standalone", "x"}),
              HasSubstr("--nnodes"));
}

TEST(LaunchFlagsTest, Help) {
  for (const char* h : {"--help", "-h"}) {
    LaunchCommand c = ParseOk({"--nproc-per-node=2", h});
    EXPECT_TRUE(c.show_help);
    EXPECT_THAT(c.help_text,
                HasSubstr("Usage: muster [FLAGS] PROGRAM [ARGS...]"));
    EXPECT_THAT(c.help_text, HasSubstr("--nproc_per_node"));
    EXPECT_THAT(c.help_text, HasSubstr("PET_NPROC_PER_NODE"));
    EXPECT_THAT(c.help_text, HasSubstr("--rdzv-conf"));
  }
  // Help wins over a missing program and over a bad flag value seen after
  // parsing.
  EXPECT_TRUE(ParseOk({"--nnodes=bogus", "--help"}).show_help);
  // After the program, --help is the program's.
  LaunchCommand p = ParseOk({"train.py", "--help"});
  EXPECT_FALSE(p.show_help);
  EXPECT_THAT(p.config.program,
              ElementsAre("python3", "-u", "train.py", "--help"));
}

TEST(LaunchFlagsTest, Version) {
  LaunchCommand c = ParseOk({"--version"});
  EXPECT_TRUE(c.show_version);
  EXPECT_FALSE(c.show_help);
}

// --- the program
// --------------------------------------------------------------------------------

TEST(LaunchFlagsTest, NoProgram) {
  EXPECT_EQ(ParseError({}),
            "no training program given: muster [FLAGS] PROGRAM [ARGS...]");
  EXPECT_EQ(ParseError({"--nproc-per-node=2"}),
            "no training program given: muster [FLAGS] PROGRAM [ARGS...]");
  EXPECT_EQ(ParseError({"--nproc-per-node=2", "--"}),
            "no training program given: muster [FLAGS] PROGRAM [ARGS...]");
}

TEST(LaunchFlagsTest, ProgramWrapping) {
  EXPECT_THAT(ParseOk({"train.py", "--lr", "0.1"}).config.program,
              ElementsAre("python3", "-u", "train.py", "--lr", "0.1"));
  EXPECT_THAT(ParseOk({"dir/Train.PY"}).config.program,
              ElementsAre("python3", "-u", "dir/Train.PY"));
  EXPECT_THAT(ParseOk({"train.py"}, {{"PYTHON_EXEC", "/usr/bin/python3"}})
                  .config.program,
              ElementsAre("/usr/bin/python3", "-u", "train.py"));
  EXPECT_THAT(
      ParseOk({"-m", "pkg.train"}, {{"PYTHON_EXEC", "/opt/py"}}).config.program,
      ElementsAre("/opt/py", "-u", "-m", "pkg.train"));
  EXPECT_THAT(ParseOk({"--no-python", "train.py", "a"}).config.program,
              ElementsAre("train.py", "a"));
  EXPECT_THAT(
      ParseOk({"--no_python", "bash", "-c", "echo $RANK"}).config.program,
      ElementsAre("bash", "-c", "echo $RANK"));
  EXPECT_THAT(ParseOk({"--run-path", "/abs/script"}).config.program,
              ElementsAre("python3", "-u", "-c", _, "/abs/script"));
  EXPECT_THAT(ParseOk({"./train.exe", "-x"}).config.program,
              ElementsAre("./train.exe", "-x"));
}

TEST(LaunchFlagsTest, ConflictingProgramFlags) {
  EXPECT_THAT(
      ParseError({"-m", "--no-python", "pkg"}),
      HasSubstr("-m/--module runs PROGRAM as a Python module and --no-python"));
  EXPECT_THAT(ParseError({"--module", "--no_python", "pkg"}),
              HasSubstr("give one of them"));
  EXPECT_THAT(ParseError({"--run-path", "--no-python", "s"}),
              HasSubstr("give one of them"));
  EXPECT_THAT(ParseError({"--run-path", "-m", "s"}),
              HasSubstr("give one of them"));
}

TEST(LaunchFlagsTest, ArgumentsAfterTheProgramAreTheProgramsOwn) {
  LaunchCommand c =
      ParseOk({"--nproc-per-node=2", "train.py", "--lr", "0.1", "--nnodes", "3",
               "--standalone", "--", "-m", "--bogus-flag"});
  EXPECT_EQ(c.config.max_nodes, 1);
  EXPECT_EQ(c.config.nproc_per_node, 2);
  EXPECT_THAT(
      c.config.program,
      ElementsAre("python3", "-u", "train.py", "--lr", "0.1", "--nnodes", "3",
                  "--standalone", "--", "-m", "--bogus-flag"));
  EXPECT_THAT(c.warnings, IsEmpty());
}

TEST(LaunchFlagsTest, DoubleDashSeparator) {
  EXPECT_THAT(
      ParseOk({"--nproc-per-node=2", "--", "train.py", "--x"}).config.program,
      ElementsAre("python3", "-u", "train.py", "--x"));
  // After `--` even a name that looks like a flag is the program.
  EXPECT_THAT(ParseOk({"--", "--weird", "a"}).config.program,
              ElementsAre("--weird", "a"));
  EXPECT_THAT(ParseOk({"--", "x", "--", "y"}).config.program,
              ElementsAre("x", "--", "y"));
}

TEST(LaunchFlagsTest, DoubleSpelledProgramFlagValuesAreNotConsumed) {
  // A value-taking flag eats exactly one argument; the next is the program.
  LaunchCommand c =
      ParseOk({"--nnodes", "1", "--nproc_per_node", "2", "train.exe", "3"});
  EXPECT_THAT(c.config.program, ElementsAre("train.exe", "3"));
}

// --- host resources and program checks
// ----------------------------------------------------------

// --- torchrun 2.x parity (issue 16)
// ------------------------------------------------------

TEST(TorchrunParityTest,
     LogsSpecsAcceptsTheDefaultAndRefusesPluginsInEverySpelling) {
  // torchrun fails for an entry point it cannot load; muster can load none.
  for (const Args& args :
       {Args{"--logs-specs=mine", "x"}, Args{"--logs_specs", "mine", "x"}}) {
    std::string e = ParseError(args);
    EXPECT_THAT(e, HasSubstr("cannot load torchrun.logs_specs entry points"));
    EXPECT_THAT(e, Not(HasSubstr("unknown flag")));
  }
  EXPECT_THAT(ParseError({"x"}, {{"PET_LOGS_SPECS", "mine"}}),
              HasSubstr("PET_LOGS_SPECS=mine"));
  // torchrun's own default plugin is what muster does: accepted.
  EXPECT_EQ(ParseOk({"--logs-specs=default", "x"}).config.nproc_per_node, 1);
  EXPECT_EQ(
      ParseOk({"--logs_specs", "DefaultLogsSpecs", "x"}).config.nproc_per_node,
      1);
}

TEST(TorchrunParityTest, ShutdownTimeoutDefaultsAndEnvironment) {
  EXPECT_EQ(ParseOk({"x"}).config.stop_grace, absl::Seconds(30));
  EXPECT_EQ(ParseOk({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})
                .config.stop_grace,
            absl::Seconds(7));
  EXPECT_EQ(ParseOk({"--shutdown-timeout=2", "x"},
                    {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})
                .config.stop_grace,
            absl::Seconds(2));
  EXPECT_EQ(ParseOk({"--shutdown_timeout=0", "x"}).config.stop_grace,
            absl::ZeroDuration());
  EXPECT_THAT(ParseError({"--shutdown-timeout=-1", "x"}),
              HasSubstr("--shutdown-timeout=-1: expected seconds >= 0"));
  EXPECT_THAT(ParseError({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}}),
              HasSubstr("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon"));
}

TEST(TorchrunParityTest, SignalsToHandle) {
  EXPECT_THAT(ParseOk({"x"}).config.signals_to_handle,
              ElementsAre(SIGTERM, SIGINT, SIGHUP, SIGQUIT));
  EXPECT_THAT(ParseError({"--signals-to-handle=SIGTERM,SIGBOGUS", "x"}),
              HasSubstr("unknown signal 'SIGBOGUS'"));
  EXPECT_THAT(ParseError({"--signals-to-handle=SIGKILL", "x"}),
              HasSubstr("cannot be caught"));
  EXPECT_THAT(ParseError({"--signals-to-handle=,", "x"}),
              HasSubstr("at least one signal"));
}

TEST(TorchrunParityTest, NumaBindingAndEventHandlerValues) {
  for (const char* mode : {"node", "socket", "exclusive", "core-complex"}) {
    EXPECT_EQ(ParseOk({absl::StrCat("--numa-binding=", mode), "x"})
                  .config.numa_binding,
              mode);
  }
  EXPECT_THAT(ParseError({"--numa-binding=rack", "x"}),
              HasSubstr("expected node, socket, exclusive or core-complex"));
  EXPECT_EQ(ParseOk({"x"}).config.event_log_handler, "null");
  EXPECT_EQ(ParseOk({"--event-log-handler=dynamic_rendezvous", "x"})
                .config.event_log_handler,
            "null");
  EXPECT_THAT(ParseError({"--event_log_handler=kafka", "x"}),
              HasSubstr("expected null or console"));
}

TEST(LaunchFlagsTest, RecoveryModes) {
  EXPECT_EQ(ParseOk({"x"}).config.recovery, agent::Recovery::kRestart);
  EXPECT_EQ(ParseOk({"--recovery=restart", "x"}).config.recovery,
            agent::Recovery::kRestart);
  EXPECT_EQ(ParseOk({"x"}, {{"PET_RECOVERY", "in-place"}}).config.recovery,
            agent::Recovery::kInPlace);
  const std::string bad = ParseError({"--recovery=inplace", "x"});
  EXPECT_THAT(bad, HasSubstr("inplace"));
  EXPECT_THAT(bad, HasSubstr("expected in-place or restart"));
  EXPECT_THAT(ParseError({"x"}, {{"PET_RECOVERY", "sometimes"}}),
              HasSubstr("PET_RECOVERY"));
}

TEST(TorchrunParityTest, DuplicateFiltersWithoutTeeWarn) {
  LaunchCommand c = ParseOk({"--duplicate-stdout-filters=loss", "x"});
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("teed streams only"));
  // "" filters nothing (torchrun: an empty list duplicates no line).
  EXPECT_THAT(ParseOk({"--duplicate-stdout-filters=,", "-t1", "x"})
                  .config.duplicate_stdout_filters,
              IsEmpty());
}

TEST(TorchrunParityTest, VirtualLocalRankNeedsADevicePerWorker) {
  EXPECT_TRUE(ParseOk({"--virtual-local-rank", "--nproc-per-node=2", "x"},
                      {{"CUDA_VISIBLE_DEVICES", "3,5"}})
                  .config.virtual_local_rank);
  EXPECT_THAT(ParseError({"--virtual-local-rank", "--nproc-per-node=3", "x"},
                         {{"CUDA_VISIBLE_DEVICES", "3,5"}}),
              HasSubstr("CUDA_VISIBLE_DEVICES=3,5, which has 2"));
}

TEST(TorchrunParityTest, StartMethodOtherThanSpawnWarnsOnce) {
  EXPECT_THAT(ParseOk({"--start-method=spawn", "x"}).warnings, IsEmpty());
  LaunchCommand c = ParseOk({"--start_method=fork", "x"});
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("--start-method=fork has no effect"));
}

TEST(TorchrunParityTest, PythonInterpreterPrecedence) {
  const Env exec = {{"PYTHON_EXEC", "/usr/bin/python3"}};
  LaunchCommand from_path = ParseOk({"t.py"});
  EXPECT_EQ(from_path.config.python_interpreter, "python3");
  EXPECT_EQ(from_path.config.python_source, "python3 from PATH");
  LaunchCommand from_exec = ParseOk({"t.py"}, exec);
  EXPECT_THAT(from_exec.config.program,
              ElementsAre("/usr/bin/python3", "-u", "t.py"));
  EXPECT_EQ(from_exec.config.python_source, "PYTHON_EXEC");
  LaunchCommand flag = ParseOk({"--python=/opt/p", "t.py"}, exec);
  EXPECT_THAT(flag.config.program, ElementsAre("/opt/p", "-u", "t.py"));
  EXPECT_EQ(flag.config.python_source, "--python");
  ASSERT_EQ(flag.warnings.size(), 1u);
  EXPECT_THAT(flag.warnings[0], HasSubstr("wins over PYTHON_EXEC"));
  // Not run through Python: no interpreter to report.
  EXPECT_EQ(ParseOk({"./train"}).config.python_interpreter, "");
}

TEST(TorchrunParityTest, ScriptWithoutRunBitOrExtensionRunsThroughPython) {
  const std::string dir = ::testing::TempDir();
  const std::string script = dir + "/parity_script_no_ext";
  const std::string tool = dir + "/parity_tool";
  { std::ofstream(script) << "print('hi')\n"; }
  { std::ofstream(tool) << "#!/bin/sh\n"; }
  chmod(script.c_str(), 0644);
  chmod(tool.c_str(), 0755);
  EXPECT_THAT(ParseOk({script, "a"}).config.program,
              ElementsAre("python3", "-u", script, "a"));
  EXPECT_THAT(ParseOk({tool}).config.program, ElementsAre(tool));
  EXPECT_THAT(ParseOk({"--no-python", script}).config.program,
              ElementsAre(script));
}

TEST(DetectHostResourcesTest, CountsSomething) {
  HostResources h = DetectHostResources({});
  EXPECT_GE(h.cpus, 1);
  EXPECT_GE(h.gpus, 0);
  EXPECT_FALSE(h.gpu_source.empty());
  EXPECT_EQ(DetectHostResources({{"CUDA_VISIBLE_DEVICES", "-1"}}).gpus, 0);
  EXPECT_EQ(DetectHostResources({{"CUDA_VISIBLE_DEVICES", ""}}).gpus, 0);
  EXPECT_LE(DetectHostResources({{"CUDA_VISIBLE_DEVICES", "0"}}).gpus, 1);
}

TEST(CheckProgramTest, FindsExecutables) {
  AgentConfig c;
  c.program = {"/bin/sh", "-c", "true"};
  EXPECT_TRUE(CheckProgram(c, {}).ok());
  c.program = {"sh"};
  EXPECT_TRUE(CheckProgram(c, {{"PATH", "/nonexistent:/bin:/usr/bin"}}).ok());
  c.program = {"muster-no-such-program"};
  absl::Status s = CheckProgram(c, {{"PATH", "/bin:/usr/bin"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("muster-no-such-program: not found in PATH"));
  c.program = {"/nonexistent/train.exe"};
  EXPECT_THAT(CheckProgram(c, {}).message(),
              HasSubstr("/nonexistent/train.exe: no such file"));
  const std::string plain = testing::TempDir() + "/muster_not_executable";
  std::ofstream(plain) << "data\n";
  c.program = {plain};
  EXPECT_THAT(CheckProgram(c, {}).message(),
              HasSubstr("not an executable file"));
  std::remove(plain.c_str());
  c.program = {"/bin/sh", "-u", "/nonexistent/train.py"};
  EXPECT_THAT(CheckProgram(c, {}).message(),
              HasSubstr("/nonexistent/train.py: no such file"));
  c.program = {"/bin/sh", "-u", "-m", "pkg"};
  EXPECT_TRUE(CheckProgram(c, {}).ok());
  c.program.clear();
  EXPECT_FALSE(CheckProgram(c, {}).ok());
}

}  // namespace
}  // namespace muster::cli
