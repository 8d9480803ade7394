// The client side of security in the command line: rdzv-conf's tls_ca,
// tls_cert, tls_key and token_file, MUSTER_RDZV_TOKEN (launcher, `muster
// status`).
#include "cli/security_flags.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/launch_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"

namespace muster::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Env = std::map<std::string, std::string>;

constexpr char kToken[] = "cli-test-token-0123456789abcdef";

HostResources Host() {
  HostResources h;
  h.cpus = 8;
  h.gpus = 0;
  return h;
}

class SecurityFlagsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto pki = testing::MakeTestPki(testing::MakeTempDir("security_flags"));
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = new testing::TestPki(*pki);
    token_file_ = new std::string(pki_->dir + "/job.token");
    std::ofstream(*token_file_) << kToken << "\n";
  }
  absl::StatusOr<LaunchCommand> Launch(const std::string& conf,
                                       const Env& env = {}) {
    std::vector<std::string> args = {"--nnodes=2",
                                     "--rdzv-endpoint=node0:29400",
                                     "--rdzv-id=j", "--no-python"};
    if (!conf.empty()) args.push_back("--rdzv-conf=" + conf);
    args.push_back("/bin/true");
    return ParseLaunchCommand(args, env, Host());
  }
  static testing::TestPki* pki_;
  static std::string* token_file_;
};
testing::TestPki* SecurityFlagsTest::pki_ = nullptr;
std::string* SecurityFlagsTest::token_file_ = nullptr;

TEST_F(SecurityFlagsTest, LauncherReadsTlsFilesAndTheToken) {
  auto cmd = Launch(absl::StrCat(
      "tls_ca=", pki_->ca_cert, ",tls_cert=", pki_->client_cert, ",tls_key=",
      pki_->client_key, ",token_file=", *token_file_, ",join_timeout=30"));
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_EQ(cmd->config.security.tls_ca, pki_->ca_cert);
  EXPECT_EQ(cmd->config.security.tls_cert, pki_->client_cert);
  EXPECT_EQ(cmd->config.security.token, kToken);
  EXPECT_EQ(cmd->config.join_timeout, absl::Seconds(30));
  // The environment's token, when no token_file is given; PET_RDZV_CONF too.
  auto env = Launch("", {{"MUSTER_RDZV_TOKEN", kToken},
                         {"PET_RDZV_CONF", "tls_ca=" + pki_->ca_cert}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->config.security.token, kToken);
  EXPECT_EQ(env->config.security.tls_ca, pki_->ca_cert);
  // Neither: plaintext, no token (as before).
  auto plain = Launch("");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->config.security.tls());
  EXPECT_TRUE(plain->config.security.token.empty());
}

TEST_F(SecurityFlagsTest, LauncherRefusesBadSecuritySettingsByName) {
  struct Case {
    std::string conf;
    Env env;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"tls_ca=/nonexistent/ca.pem", {}, "/nonexistent/ca.pem"},
      {"tls_ca=" + pki_->ca_cert + ",tls_cert=" + pki_->client_cert,
       {},
       "tls_key"},
      {"tls_cert=" + pki_->client_cert + ",tls_key=" + pki_->client_key,
       {},
       "tls_ca"},
      {"tls_ca=" + pki_->ca_cert + ",tls_cert=" + pki_->client_cert +
           ",tls_key=" + pki_->server_key,
       {},
       "is not the key"},
      {"tls_ca=" + pki_->client_key, {}, "not a PEM certificate"},
      {"token_file=/nonexistent/token", {}, "/nonexistent/token"},
      {"tls_ca=", {}, "needs a file path"},
      {"", {{"MUSTER_RDZV_TOKEN", "short"}}, "MUSTER_RDZV_TOKEN"},
  };
  for (const Case& c : cases) {
    auto cmd = Launch(c.conf, c.env);
    ASSERT_FALSE(cmd.ok()) << c.conf;
    EXPECT_THAT(std::string(cmd.status().message()), HasSubstr(c.want))
        << c.conf;
    EXPECT_THAT(std::string(cmd.status().message()), Not(HasSubstr("short")))
        << "the token itself is never in a message";
  }
}

TEST_F(SecurityFlagsTest, StatusTakesSecurityKeysAndIgnoresTheRest) {
  auto s = ClientSecurityFromFlags(
      "join_timeout=5,tls_ca=" + pki_->ca_cert + ",is_host=1", *token_file_,
      {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tls_ca, pki_->ca_cert);
  EXPECT_EQ(s->token, kToken);
  auto from_env =
      ClientSecurityFromFlags("", "", {{"MUSTER_RDZV_TOKEN", kToken}});
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->token, kToken);
  EXPECT_FALSE(ClientSecurityFromFlags("tls_ca=/nonexistent", "", {}).ok());
}

}  // namespace
}  // namespace muster::cli
