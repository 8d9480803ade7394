#include "muster/agent/worker_env.h"

#include <cstdlib>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/worker_env_sample.h"

namespace muster::agent {
namespace {

using Env = std::map<std::string, std::string>;

TEST(BuildWorkerEnvTest, EveryContractVariableForHeterogeneousTwoNodeJob) {
  Env env = BuildWorkerEnv({}, NodeBRank1());
  const Env expected = {
      {"RANK", "4"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "5"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "4"},
      {"ROLE_NAME", "trainer"},
      {"ROLE_WORLD_SIZE", "5"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job-42"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", "/tmp/logs/job-42/attempt_2/1/error.json"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"OMP_NUM_THREADS", "1"},
      {"MUSTER_STORE_ENDPOINT", "10.0.0.1:29400"},
      {"MUSTER_STORE_PREFIX", "job-42/2/"},
      {"MUSTER_RUN_ID", "job-42"},
      {"MUSTER_ROUND", "7"},
  };
  // Exactly the contract: nothing missing, nothing extra.
  EXPECT_EQ(env, expected);
}

TEST(BuildWorkerEnvTest, NodeAOfTheSameJob) {
  WorkerEnvParams p = NodeBRank1();
  p.local_rank = 2;
  p.rank = 2;
  p.local_world_size = 3;
  p.group_rank = 0;
  p.role_rank = 2;
  Env env = BuildWorkerEnv({}, p);
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["LOCAL_RANK"], "2");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
  EXPECT_EQ(env["GROUP_RANK"], "0");
  EXPECT_EQ(env["WORLD_SIZE"], "5");
}

TEST(BuildWorkerEnvTest, UserSettingsSurvive) {
  Env base = {{"OMP_NUM_THREADS", "8"},
              {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  Env env = BuildWorkerEnv(base, NodeBRank1());
  EXPECT_EQ(env["OMP_NUM_THREADS"], "8");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "0");
}

TEST(BuildWorkerEnvTest, NoOmpDefaultForOneWorkerPerNode) {
  WorkerEnvParams p = NodeBRank1();
  p.local_world_size = 1;
  p.local_rank = 0;
  Env env = BuildWorkerEnv({}, p);
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
}

TEST(BuildWorkerEnvTest,
     BaseVariablesPassThroughAndStaleContractValuesAreReplaced) {
  Env base = {
      {"PATH", "/usr/bin:/bin"},
      {"HOME", "/home/u"},
      {"CUDA_VISIBLE_DEVICES", "0,1"},
      {"PET_NNODES", "2"},
      {"EMPTY", ""},
      // From an enclosing launcher: must not leak into this job's workers.
      {"RANK", "99"},
      {"MASTER_PORT", "1"},
      {"TORCHELASTIC_RUN_ID", "outer"}};
  Env env = BuildWorkerEnv(base, NodeBRank1());
  EXPECT_EQ(env["PATH"], "/usr/bin:/bin");
  EXPECT_EQ(env["HOME"], "/home/u");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "0,1");
  EXPECT_EQ(env["PET_NNODES"], "2");
  ASSERT_EQ(env.count("EMPTY"), 1u);
  EXPECT_EQ(env["EMPTY"], "");
  EXPECT_EQ(env["RANK"], "4");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job-42");
}

TEST(BuildWorkerEnvTest, NoErrorFileDropsAnInheritedOne) {
  WorkerEnvParams p = NodeBRank1();
  p.error_file.clear();
  Env env =
      BuildWorkerEnv({{"TORCHELASTIC_ERROR_FILE", "/outer/error.json"}}, p);
  EXPECT_EQ(env.count("TORCHELASTIC_ERROR_FILE"), 0u);
}

TEST(BuildWorkerEnvTest, LargeRoundIsDecimal) {
  WorkerEnvParams p = NodeBRank1();
  p.round = 12345678901234LL;
  EXPECT_EQ(BuildWorkerEnv({}, p)["MUSTER_ROUND"], "12345678901234");
}

TEST(CurrentEnvironmentTest, ReadsTheProcessEnvironment) {
  ASSERT_EQ(setenv("MUSTER_ENV_TEST_VAR", "a=b c", 1), 0);
  ASSERT_EQ(setenv("MUSTER_ENV_TEST_EMPTY", "", 1), 0);
  Env env = CurrentEnvironment();
  EXPECT_EQ(env["MUSTER_ENV_TEST_VAR"],
            "a=b c");  // split at the first '=' only
  ASSERT_EQ(env.count("MUSTER_ENV_TEST_EMPTY"), 1u);
  EXPECT_EQ(env["MUSTER_ENV_TEST_EMPTY"], "");
  unsetenv("MUSTER_ENV_TEST_VAR");
  EXPECT_EQ(CurrentEnvironment().count("MUSTER_ENV_TEST_VAR"), 0u);
}

}  // namespace
}  // namespace muster::agent

namespace muster::agent {
namespace {

TEST(BuildWorkerEnvTest, BothSpellingsOfAsyncErrorHandling) {
  // torch 1.13-2.1 read NCCL_ASYNC_ERROR_HANDLING, 2.2+ the TORCH_ name.
  Env env = BuildWorkerEnv({}, NodeBRank1());
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "1");
  // A user's value for either name is used for both.
  Env old_name =
      BuildWorkerEnv({{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, NodeBRank1());
  EXPECT_EQ(old_name["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "0");
  EXPECT_EQ(old_name["NCCL_ASYNC_ERROR_HANDLING"], "0");
  Env new_name =
      BuildWorkerEnv({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}, NodeBRank1());
  EXPECT_EQ(new_name["NCCL_ASYNC_ERROR_HANDLING"], "3");
}

TEST(BuildWorkerEnvTest, VirtualLocalRank) {
  WorkerEnvParams p = NodeBRank1();  // local rank 1
  p.virtual_local_rank = true;
  Env env = BuildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "5, 7"}}, p);
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "7");
  EXPECT_EQ(env["RANK"], "4");
  // No list: the local rank's own index.
  EXPECT_EQ(BuildWorkerEnv({}, p)["CUDA_VISIBLE_DEVICES"], "1");
  // Off: LOCAL_RANK is the real one and the list is inherited as it is.
  p.virtual_local_rank = false;
  Env off = BuildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "5,7"}}, p);
  EXPECT_EQ(off["LOCAL_RANK"], "1");
  EXPECT_EQ(off["CUDA_VISIBLE_DEVICES"], "5,7");
}

}  // namespace
}  // namespace muster::agent
