// Security end to end (issue 12): a real `musterd --tls-cert --tls-key
// --require-token --admin-token-file` on loopback, a real two-node job over
// TLS with its token (train: Gloo bootstrapped through the Store with the
// round credential), and a hostile client (plain gRPC stubs, its own metadata)
// that replays the attacks of the issue while the job runs: reading status,
// reading/writing/deleting the job's Store keys, joining, taking over a
// member's node id, and failing the job by reporting for another node. The
// job must stay in round 1 and exit 0, and the token must appear in no
// worker's environment, no output of musterd, the agents or `muster status`.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "muster/v1/store.grpc.pb.h"
#include "tests/testing/files.h"
#include "tests/testing/musterd.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::CallUnary;
using ::muster::testing::EnvWithoutLauncher;
using ::muster::testing::FreePort;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::MakeJoin;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::PrepareContext;
using ::muster::testing::RawSession;
using ::muster::testing::ReadFile;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::muster::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = "secjob";

class SecurityE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("security_e2e");
    auto pki = muster::testing::MakeTestPki(dir_);
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
    WriteFile(dir_ + "/admin.token", absl::StrCat(testing::kAdminToken, "\n"),
              0600);
    WriteFile(dir_ + "/job.token", absl::StrCat(testing::kJobToken, "\n"),
              0600);
    port_ = FreePort();
    endpoint_ = LoopbackEndpoint(port_);
    musterd_ = std::make_unique<MusterdProcess>(
        port_,
        std::vector<std::string>{
            "--tls-cert=" + pki_.server_cert, "--tls-key=" + pki_.server_key,
            "--require-token", "--admin-token-file=" + dir_ + "/admin.token",
            "--log-level=debug"});
    ASSERT_TRUE(musterd_->ready()) << musterd_->proc().Output();
  }

  std::string TlsConf() const { return "tls_ca=" + pki_.ca_cert; }

  // One agent of the job: 2 workers, each dumps its environment, sleeps
  // (while the attacks run), then trains over the Store.
  // Without `train`, the workers only sleep (they never open the Store).
  std::unique_ptr<Subprocess> StartAgent(const std::string& env_dir,
                                         bool train = true) {
    const std::string script = env_dir + "/worker.sh";
    WriteFile(script,
              absl::StrCat("#!/bin/sh\nenv > ", env_dir, "/env.$RANK\nsleep ",
                           train ? "6" : "8", "\n",
                           train ? absl::StrCat("exec ", BinPath("train"),
                                                " --epochs=3\n")
                                 : "exit 0\n"),
              0755);
    std::map<std::string, std::string> env = EnvWithoutLauncher();
    env["MUSTER_RDZV_TOKEN"] = testing::kJobToken;
    return std::make_unique<Subprocess>(
        std::vector<std::string>{
            BinPath("muster"), "--nnodes=2", "--nproc-per-node=2",
            "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint_,
            std::string("--rdzv-id=") + kJob,
            "--rdzv-conf=" + TlsConf() + "," + testing::FastRdzvConf(),
            "--no-python", script},
        env);
  }

  std::shared_ptr<grpc::Channel> HostileChannel() const {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(pki_.ca_cert);
    return grpc::CreateChannel(endpoint_, grpc::SslCredentials(ssl));
  }

  // `muster status` with the given extra flags; returns exit code and output.
  std::pair<int, std::string> Status(std::vector<std::string> flags,
                                     absl::Duration timeout) {
    std::vector<std::string> argv = {BinPath("muster"), "status",
                                     "--rdzv-endpoint=" + endpoint_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Subprocess p(argv, EnvWithoutLauncher());
    int code = p.WaitOrKill(timeout);
    outputs_ += p.Output();
    return {code, p.Output()};
  }

  std::string dir_;
  muster::testing::TestPki pki_;
  int port_ = 0;
  std::string endpoint_;
  std::unique_ptr<MusterdProcess> musterd_;
  std::string outputs_;  // of every `muster status`, for the leak check
};

TEST_F(SecurityE2eTest, HostileClientCannotDisturbATwoNodeTlsJob) {
  const std::string env_dir = dir_ + "/envs";
  std::filesystem::create_directories(env_dir);
  auto a = StartAgent(env_dir);
  auto b = StartAgent(env_dir);

  // The admin sees the job RUNNING with its two members.
  const std::vector<std::string> admin = {
      "--rdzv-conf=" + TlsConf(), "--token-file=" + dir_ + "/admin.token",
      "--json", kJob};
  std::string admin_json;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto [code, out] = Status(admin, absl::Seconds(10));
        admin_json = out;
        return code == 0 && out.find("\"RUNNING\"") != std::string::npos;
      },
      absl::Seconds(60), absl::Milliseconds(250)))
      << admin_json << "\n--- a ---\n"
      << a->Output() << "\n--- b ---\n"
      << b->Output();
  std::smatch m;
  std::vector<std::string> members;
  static const std::regex kNode(R"re("node_id": "([^"]+)")re");
  for (auto it =
           std::sregex_iterator(admin_json.begin(), admin_json.end(), kNode);
       it != std::sregex_iterator(); ++it) {
    members.push_back((*it)[1]);
  }
  ASSERT_EQ(members.size(), 2u) << admin_json;
  const std::string prefix = absl::StrCat(kJob, "/1");

  auto channel = HostileChannel();
  auto rdzv = v1::Rendezvous::NewStub(channel);
  auto store = v1::Store::NewStub(channel);

  // 1. Status of the job: refused, and the job is not listed.
  for (const auto& [token, code] :
       std::vector<std::pair<std::string, grpc::StatusCode>>{
           {"", grpc::StatusCode::UNAUTHENTICATED},
           {testing::kWrongToken, grpc::StatusCode::PERMISSION_DENIED}}) {
    v1::GetStatusRequest req;
    req.set_job_id(kJob);
    EXPECT_EQ(CallUnary(*rdzv, &v1::Rendezvous::Stub::GetStatus, req, token)
                  .error_code(),
              code)
        << token;
    grpc::ClientContext all_ctx;
    PrepareContext(&all_ctx, token);
    v1::GetStatusResponse all;
    ASSERT_TRUE(rdzv->GetStatus(&all_ctx, v1::GetStatusRequest(), &all).ok());
    EXPECT_EQ(all.jobs_size(), 0) << token;
  }

  // 2. Store Set / Get / Delete in the job's namespace.
  for (const auto& [token, code] :
       std::vector<std::pair<std::string, grpc::StatusCode>>{
           {"", grpc::StatusCode::UNAUTHENTICATED},
           {testing::kWrongToken, grpc::StatusCode::PERMISSION_DENIED},
           {testing::kAdminToken, grpc::StatusCode::PERMISSION_DENIED}}) {
    v1::SetRequest set;
    set.set_prefix(prefix);
    set.set_key("rank_0");
    set.set_value("10.6.6.6:1");
    EXPECT_EQ(CallUnary(*store, &v1::Store::Stub::Set, set, token).error_code(),
              code);
    v1::GetRequest get;
    get.set_prefix(prefix);
    get.set_key("anything");
    EXPECT_EQ(CallUnary(*store, &v1::Store::Stub::Get, get, token).error_code(),
              code);
    v1::DeleteRequest del;
    del.set_prefix(prefix);
    del.set_key("anything");
    EXPECT_EQ(
        CallUnary(*store, &v1::Store::Stub::Delete, del, token).error_code(),
        code);
  }

  // 3. Join without the token or with a wrong one; 4. with the token but a
  // member's node id (no session secret).
  auto join = [&](const std::string& token, const std::string& node,
                  std::vector<v1::AgentMessage> after = {}) {
    RawSession session(channel, token);
    v1::AgentMessage msg;
    *msg.mutable_join() = MakeJoin({.job_id = kJob,
                                    .node_id = node,
                                    .hostname = "evil",
                                    .advertised_addr = "127.0.0.1",
                                    .local_world_size = 2,
                                    .min_nodes = 2,
                                    .max_nodes = 2,
                                    .heartbeat_timeout_ms = 5000});
    session.stream().Write(msg);
    for (const v1::AgentMessage& m : after) session.stream().Write(m);
    session.stream().WritesDone();
    return session.Finish();
  };
  EXPECT_EQ(join("", "evil-node").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(join(testing::kWrongToken, "evil-node").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  for (const std::string& member : members) {
    grpc::Status s = join(testing::kJobToken, member);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS)
        << s.error_message();
  }
  // 5. With the token, as a new node (a spare: the job is at max), report a
  // member's worker as failed: refused, the spare is no member of round 1.
  v1::AgentMessage fail;
  v1::WorkerFailure* f = fail.mutable_workers_failed()->add_failures();
  fail.mutable_workers_failed()->set_round(1);
  f->set_node_id(members[0]);
  f->set_global_rank(0);
  f->set_exit_code(1);
  f->set_error_message("spoofed failure");
  join(testing::kJobToken, "evil-spare", {fail});

  // 6. A plaintext `muster status` against the TLS port fails fast, naming
  // TLS.
  const absl::Time start = absl::Now();
  auto [plain_code, plain_out] =
      Status({"--token-file=" + dir_ + "/job.token"}, absl::Seconds(20));
  EXPECT_NE(plain_code, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(plain_out, HasSubstr("TLS"));
  EXPECT_THAT(plain_out, HasSubstr("tls_ca"));

  // The job was not disturbed: still round 1, no restart, and it succeeds.
  {
    auto [code, out] = Status(admin, absl::Seconds(10));
    EXPECT_EQ(code, 0) << out;
    EXPECT_THAT(out, HasSubstr("\"round\": \"1\"")) << out;
    EXPECT_THAT(out, HasSubstr("\"restart_count\": 0")) << out;
    EXPECT_THAT(out, Not(HasSubstr("spoofed"))) << out;
  }
  const int code_a = a->WaitOrKill(absl::Seconds(120));
  const int code_b = b->WaitOrKill(absl::Seconds(30));
  EXPECT_EQ(code_a, 0) << a->Output();
  EXPECT_EQ(code_b, 0) << b->Output();
  EXPECT_THAT(a->Output() + b->Output(), HasSubstr("all 4 ranks agree"));

  // The token is in no worker's environment, no output.
  int envs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(env_dir)) {
    if (entry.path().filename() == "worker.sh") continue;
    const std::string env = ReadFile(entry.path());
    ++envs;
    EXPECT_THAT(env, Not(HasSubstr(testing::kJobToken))) << entry.path();
    EXPECT_THAT(env, Not(HasSubstr("MUSTER_RDZV_TOKEN"))) << entry.path();
    EXPECT_THAT(env, HasSubstr("MUSTER_STORE_TOKEN=mst1.")) << entry.path();
    EXPECT_THAT(env, HasSubstr("MUSTER_STORE_TLS_CA=")) << entry.path();
  }
  EXPECT_EQ(envs, 4);
  musterd_->proc().Signal(SIGTERM);
  EXPECT_EQ(musterd_->proc().WaitOrKill(absl::Seconds(20)), 0);
  for (const std::string& out :
       {a->Output(), b->Output(), musterd_->proc().Output(), outputs_}) {
    EXPECT_THAT(out, Not(HasSubstr(testing::kJobToken)));
    EXPECT_THAT(out, Not(HasSubstr(testing::kAdminToken)));
  }
  // musterd logged the refusals (without secrets).
  EXPECT_THAT(musterd_->proc().Output(), HasSubstr("session secret"));
}

TEST_F(SecurityE2eTest, AgentsWithoutTheRightTokenOrTlsAreRefusedClearly) {
  auto run = [&](std::map<std::string, std::string> env,
                 const std::string& conf) {
    for (const auto& [k, v] : EnvWithoutLauncher()) env.emplace(k, v);
    Subprocess p({BinPath("muster"), "--nnodes=1:2", "--rdzv-backend=c10d",
                  "--rdzv-endpoint=" + endpoint_, "--rdzv-id=other",
                  "--rdzv-conf=" + conf, "--no-python", "/bin/true"},
                 env);
    const int code = p.WaitOrKill(absl::Seconds(30));
    return std::make_pair(code, p.Output());
  };
  // --require-token: no token, exit 2 naming the fix.
  auto [no_token, out1] = run({{"MUSTER_RDZV_TOKEN", ""}}, TlsConf());
  EXPECT_EQ(no_token, 2) << out1;
  EXPECT_THAT(out1, HasSubstr("requires a job token"));
  // A token that is too short is refused before anything is sent.
  auto [short_token, out2] = run({{"MUSTER_RDZV_TOKEN", "abc"}}, TlsConf());
  EXPECT_EQ(short_token, 2) << out2;
  EXPECT_THAT(out2, HasSubstr("MUSTER_RDZV_TOKEN"));
  EXPECT_THAT(out2, HasSubstr("openssl rand"));
  // Plaintext against the TLS port: names TLS, within the connect timeout.
  const absl::Time start = absl::Now();
  auto [plain, out3] =
      run({{"MUSTER_RDZV_TOKEN", testing::kJobToken}}, "connect_timeout=20");
  EXPECT_NE(plain, 0) << out3;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(out3, HasSubstr("speaks TLS"));
  EXPECT_THAT(out3 + out2 + out1, Not(HasSubstr(testing::kJobToken)));
}

// --standalone's embedded server is bound to loopback only: its listening
// socket, as `ss` shows it from a worker, is 127.0.0.1:PORT, not 0.0.0.0.
TEST(StandaloneLoopbackTest, EmbeddedServerListensOnLoopbackOnly) {
  if (std::system("command -v ss >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no `ss` (Debian package iproute2)";
  }
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=1",
                "--no-python", "/bin/sh", "-c",
                "port=${MUSTER_STORE_ENDPOINT##*:}; "
                "echo \"listeners: $(ss -Hltn \"sport = :$port\" | "
                "awk '{print $4}' | tr '\\n' ' ')\""},
               EnvWithoutLauncher());
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(60)), 0) << p.Output();
  static const std::regex kListeners(R"(listeners: ([^\n]*))");
  std::smatch m;
  const std::string out = p.Output();
  ASSERT_TRUE(std::regex_search(out, m, kListeners)) << out;
  const std::string listeners = m[1];
  // gRPC may bind a dual-stack socket: [::ffff:127.0.0.1]:PORT is loopback too.
  EXPECT_THAT(listeners, HasSubstr("127.0.0.1")) << out;
  EXPECT_THAT(listeners, Not(HasSubstr("0.0.0.0"))) << out;
  EXPECT_THAT(listeners, Not(HasSubstr("*:"))) << out;
  EXPECT_THAT(listeners, Not(HasSubstr("[::]"))) << out;
}

TEST_F(SecurityE2eTest, SighupReloadsTheCertificateWithoutDroppingAJob) {
  // The running musterd of SetUp serves pki_.server_cert (CA 1). Swap the
  // files it was started with? It reads the paths it was given: restart one on
  // copies instead, so the test can replace them.
  musterd_->proc().Signal(SIGTERM);
  ASSERT_EQ(musterd_->proc().WaitOrKill(absl::Seconds(20)), 0);
  const std::string cert = dir_ + "/live.crt", key = dir_ + "/live.key";
  WriteFile(cert, ReadFile(pki_.server_cert), 0644);
  WriteFile(key, ReadFile(pki_.server_key), 0600);
  musterd_ = std::make_unique<MusterdProcess>(
      port_,
      std::vector<std::string>{"--tls-cert=" + cert, "--tls-key=" + key,
                               "--admin-token-file=" + dir_ + "/admin.token"});
  ASSERT_TRUE(musterd_->ready());

  const std::string env_dir = dir_ + "/envs2";
  std::filesystem::create_directories(env_dir);
  auto a = StartAgent(env_dir, /*train=*/false);
  auto b = StartAgent(env_dir, /*train=*/false);
  const std::vector<std::string> admin1 = {
      "--rdzv-conf=" + TlsConf(), "--token-file=" + dir_ + "/admin.token",
      kJob};
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto [code, out] = Status(admin1, absl::Seconds(10));
        return code == 0 && out.find("RUNNING") != std::string::npos;
      },
      absl::Seconds(60), absl::Milliseconds(250)))
      << a->Output();

  WriteFile(cert, ReadFile(pki_.server2_cert), 0644);
  WriteFile(key, ReadFile(pki_.server2_key), 0600);
  musterd_->proc().Signal(SIGHUP);
  ASSERT_TRUE(musterd_->proc().WaitForOutput("reloaded", absl::Seconds(10)))
      << musterd_->proc().Output();
  const std::vector<std::string> admin2 = {
      "--rdzv-conf=tls_ca=" + pki_.ca2_cert,
      "--token-file=" + dir_ + "/admin.token", kJob};
  EXPECT_TRUE(
      WaitUntil([&] { return Status(admin2, absl::Seconds(5)).first == 0; },
                absl::Seconds(15), absl::Milliseconds(250)));
  // The job's sessions, opened before, go on to the end.
  EXPECT_EQ(a->WaitOrKill(absl::Seconds(120)), 0) << a->Output();
  EXPECT_EQ(b->WaitOrKill(absl::Seconds(30)), 0) << b->Output();
  EXPECT_TRUE(musterd_->proc().Running()) << musterd_->proc().Output();
}

}  // namespace
}  // namespace muster
