// Workers never see the job token: BuildWorkerEnv removes it and sets the
// round's Store credential and TLS files instead.
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/agent/worker_env.h"

namespace muster::agent {
namespace {

TEST(WorkerEnvSecurityTest, TokenStrippedRoundCredentialSet) {
  std::map<std::string, std::string> base = {
      {"MUSTER_RDZV_TOKEN", "the-job-token-0123456789"},
      {"PATH", "/usr/bin"},
  };
  WorkerEnvParams p;
  p.store_prefix = "job/3";
  p.store_token = "mst1.abc";
  p.store_tls_ca = "/etc/ca.pem";
  std::map<std::string, std::string> env = BuildWorkerEnv(base, p);
  EXPECT_EQ(env.count("MUSTER_RDZV_TOKEN"), 0u);
  EXPECT_EQ(env.at("MUSTER_STORE_TOKEN"), "mst1.abc");
  EXPECT_EQ(env.at("MUSTER_STORE_TLS_CA"), "/etc/ca.pem");
  EXPECT_EQ(env.count("MUSTER_STORE_TLS_CERT"), 0u);
  EXPECT_EQ(env.at("PATH"), "/usr/bin");
  for (const auto& [k, v] : env) {
    EXPECT_EQ(v.find("the-job-token"), std::string::npos) << k;
  }
}

TEST(WorkerEnvSecurityTest, InheritedStoreSettingsOfAnOuterLauncherAreDropped) {
  std::map<std::string, std::string> base = {
      {"MUSTER_STORE_TOKEN", "mst1.outer"},
      {"MUSTER_STORE_TLS_CA", "/outer/ca.pem"},
  };
  std::map<std::string, std::string> env = BuildWorkerEnv(base, {});
  EXPECT_EQ(env.count("MUSTER_STORE_TOKEN"), 0u);
  EXPECT_EQ(env.count("MUSTER_STORE_TLS_CA"), 0u);
}

}  // namespace
}  // namespace muster::agent
