// The client side of security in the command line: rdzv-conf's tls_ca,
// tls_cert, tls_key and token_file, MUSTER_RDZV_TOKEN (launcher, `muster
// status`), and doctor's security rules.
#include "cli/security_flags.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/doctor.h"
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

TEST(DoctorSecurityCheckTest, Rules) {
  using doctor::Status;
  using rendezvous::TlsProbe;
  struct Row {
    TlsProbe server;
    bool local, client_tls, token;
    Status want;
    std::string says;
  };
  const std::vector<Row> rows = {
      {TlsProbe::kPlaintext, false, false, true, Status::kWarn,
       "without TLS across hosts"},
      {TlsProbe::kPlaintext, true, false, false, Status::kPass, "this host"},
      {TlsProbe::kPlaintext, false, true, true, Status::kFail, "plaintext"},
      {TlsProbe::kTls, false, false, true, Status::kFail, "speaks TLS"},
      {TlsProbe::kTls, false, true, true, Status::kPass, "TLS"},
      {TlsProbe::kUnknown, false, true, true, Status::kInfo, "not checked"},
  };
  for (const Row& r : rows) {
    doctor::Check c = doctor::SecurityCheck("node0:29400", r.local, r.server,
                                            r.client_tls, r.token);
    EXPECT_EQ(c.id, "security");
    EXPECT_EQ(c.status, r.want) << c.summary;
    EXPECT_THAT(c.summary, HasSubstr(r.says));
    if (c.status == Status::kWarn || c.status == Status::kFail) {
      EXPECT_FALSE(c.fix.empty());
    }
  }
}

}  // namespace
}  // namespace muster::cli
