// musterd's security on loopback, in process: TLS with certificates made at
// test time by `openssl`, mTLS, plaintext/TLS mismatches named as such, job
// tokens on the Session, GetStatus and Store services (plain gRPC stubs with
// raw metadata, as a hostile client would send), round credentials, and a
// certificate reload.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/server.h"
#include "muster/store/grpc_store.h"
#include "muster/store/security.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "muster/v1/store.grpc.pb.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::CallUnary;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::NextOfKind;
using ::muster::testing::PrepareContext;
using ::muster::testing::RawSession;
using ::muster::testing::StartLoopbackServer;
using ::testing::HasSubstr;
using ::testing::Not;

class SecurityServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto pki = muster::testing::MakeTestPki(
        muster::testing::MakeTempDir("security_server_test"));
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = new muster::testing::TestPki(*pki);
  }

  std::unique_ptr<RendezvousServer> StartServer(bool tls, bool mtls = false,
                                                bool require_token = true) {
    ServerOptions options;
    if (tls) {
      options.tls.cert = pki_->server_cert;
      options.tls.key = pki_->server_key;
      if (mtls) options.tls.client_ca = pki_->ca_cert;
    }
    options.require_token = require_token;
    options.admin_token = testing::kAdminToken;
    return StartLoopbackServer(options);
  }

  static store::ClientSecurity Tls(std::string token = "") {
    store::ClientSecurity s;
    s.tls_ca = pki_->ca_cert;
    s.token = std::move(token);
    return s;
  }

  // A raw gRPC channel, as a client without muster's code would open it.
  static std::shared_ptr<grpc::Channel> RawTlsChannel(int port) {
    std::ifstream in(pki_->ca_cert);
    std::string ca((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca;
    return grpc::CreateChannel(LoopbackEndpoint(port),
                               grpc::SslCredentials(ssl));
  }

  static v1::Join MakeJoin(const std::string& node) {
    return muster::testing::MakeJoin({.job_id = "jobA",
                                      .node_id = node,
                                      .hostname = node + ".host",
                                      .advertised_addr = "127.0.0.1",
                                      .master_port = 29500,
                                      .heartbeat_interval_ms = 50,
                                      .heartbeat_timeout_ms = 5000,
                                      .session_secret = NewRandomSecret()});
  }

  // An agent of jobA with the token, in a RUNNING round 1 (1 node).
  std::unique_ptr<RendezvousClient> JoinedAgent(int port) {
    GrpcClientOptions o;
    o.endpoint = LoopbackEndpoint(port);
    o.security = Tls(testing::kJobToken);
    auto client = NewGrpcRendezvousClient(o);
    absl::Status s = client->Start(MakeJoin("node-a"));
    EXPECT_TRUE(s.ok()) << s;
    auto ready = NextOfKind(*client, v1::ServerMessage::kRoundReady);
    EXPECT_TRUE(ready.ok()) << ready.status();
    return client;
  }

  static muster::testing::TestPki* pki_;
};

muster::testing::TestPki* SecurityServerTest::pki_ = nullptr;

TEST_F(SecurityServerTest, TlsStatusWorksAndPlaintextFailsFastNamingTls) {
  auto server = StartServer(/*tls=*/true);
  ASSERT_NE(server, nullptr);
  const std::string endpoint = LoopbackEndpoint(server->port());
  auto ok = QueryStatus(endpoint, "", absl::Seconds(10), Tls());
  ASSERT_TRUE(ok.ok()) << ok.status();

  const absl::Time start = absl::Now();
  auto plain =
      QueryStatus(endpoint, "", absl::Seconds(10), store::ClientSecurity());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(plain.status().message()), HasSubstr("TLS"));
  EXPECT_THAT(std::string(plain.status().message()), HasSubstr("tls_ca"));
}

TEST_F(SecurityServerTest, TlsClientAgainstPlaintextServerNamesTls) {
  auto server = StartServer(/*tls=*/false);
  ASSERT_NE(server, nullptr);
  const absl::Time start = absl::Now();
  auto s = QueryStatus(LoopbackEndpoint(server->port()), "", absl::Seconds(10),
                       Tls());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("plaintext"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("--tls-cert"));
}

TEST_F(SecurityServerTest, WrongCaIsAFailedHandshake) {
  auto server = StartServer(/*tls=*/true);
  ASSERT_NE(server, nullptr);
  store::ClientSecurity wrong;
  wrong.tls_ca = pki_->ca2_cert;
  auto s = QueryStatus(LoopbackEndpoint(server->port()), "", absl::Seconds(10),
                       wrong);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("TLS handshake"));
}

TEST_F(SecurityServerTest, MutualTlsNeedsAClientCertificate) {
  auto server = StartServer(/*tls=*/true, /*mtls=*/true);
  ASSERT_NE(server, nullptr);
  const std::string endpoint = LoopbackEndpoint(server->port());
  auto without = QueryStatus(endpoint, "", absl::Seconds(5), Tls());
  EXPECT_FALSE(without.ok());
  store::ClientSecurity with = Tls();
  with.tls_cert = pki_->client_cert;
  with.tls_key = pki_->client_key;
  auto ok = QueryStatus(endpoint, "", absl::Seconds(10), with);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST_F(SecurityServerTest, BadServerTlsFilesAreRefusedAtStart) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.tls.cert = pki_->server_cert;
  options.tls.key = pki_->client_key;  // not its key
  auto server = RendezvousServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("--tls-key"));
  options.tls.key = "/nonexistent/key.pem";
  server = RendezvousServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("/nonexistent/key.pem"));
}

TEST_F(SecurityServerTest, TokensGuardStatusStoreAndJoin) {
  auto server = StartServer(/*tls=*/true);
  ASSERT_NE(server, nullptr);
  auto agent = JoinedAgent(server->port());
  auto channel = RawTlsChannel(server->port());
  auto rdzv = v1::Rendezvous::NewStub(channel);
  auto store = v1::Store::NewStub(channel);

  // GetStatus of the job.
  for (const auto& [token, code] :
       std::vector<std::pair<std::string, grpc::StatusCode>>{
           {"", grpc::StatusCode::UNAUTHENTICATED},
           {testing::kWrongToken, grpc::StatusCode::PERMISSION_DENIED},
           {testing::kJobToken, grpc::StatusCode::OK},
           {testing::kAdminToken, grpc::StatusCode::OK}}) {
    v1::GetStatusRequest req;
    req.set_job_id("jobA");
    grpc::Status s =
        CallUnary(*rdzv, &v1::Rendezvous::Stub::GetStatus, req, token);
    EXPECT_EQ(s.error_code(), code)
        << "token '" << token << "': " << s.error_message();
    EXPECT_THAT(s.error_message(), Not(HasSubstr(testing::kJobToken)));
  }
  // Every job: the job is hidden from a caller without its token.
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx);
    v1::GetStatusResponse resp;
    ASSERT_TRUE(rdzv->GetStatus(&ctx, v1::GetStatusRequest(), &resp).ok());
    EXPECT_EQ(resp.jobs_size(), 0);
  }

  // Store in the job's namespace.
  const std::string prefix = "jobA/1";
  for (const auto& [token, code] :
       std::vector<std::pair<std::string, grpc::StatusCode>>{
           {"", grpc::StatusCode::UNAUTHENTICATED},
           {testing::kWrongToken, grpc::StatusCode::PERMISSION_DENIED},
           {testing::kAdminToken, grpc::StatusCode::PERMISSION_DENIED},
           {DeriveStoreCredential(testing::kJobToken, "jobA/2"),
            grpc::StatusCode::PERMISSION_DENIED},
           {DeriveStoreCredential(testing::kJobToken, prefix),
            grpc::StatusCode::OK},
           {testing::kJobToken, grpc::StatusCode::OK}}) {
    v1::SetRequest set;
    set.set_prefix(prefix);
    set.set_key("k");
    set.set_value("v");
    EXPECT_EQ(CallUnary(*store, &v1::Store::Stub::Set, set, token).error_code(),
              code)
        << token;
    v1::GetRequest get;
    get.set_prefix(prefix);
    get.set_key("k");
    EXPECT_EQ(CallUnary(*store, &v1::Store::Stub::Get, get, token).error_code(),
              code)
        << token;
    v1::DeleteRequest del;
    del.set_prefix(prefix);
    del.set_key("nothing");
    EXPECT_EQ(
        CallUnary(*store, &v1::Store::Stub::Delete, del, token).error_code(),
        code)
        << token;
  }
  // --require-token: no keys planted for a job that has not started.
  v1::SetRequest plant;
  plant.set_prefix("jobB/1");
  plant.set_key("k");
  EXPECT_EQ(CallUnary(*store, &v1::Store::Stub::Set, plant).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // Join: without the token, with a wrong one; with the token but another
  // node's id and no session secret.
  for (const auto& [token, code, node] :
       std::vector<std::tuple<std::string, grpc::StatusCode, std::string>>{
           {"", grpc::StatusCode::UNAUTHENTICATED, "x"},
           {testing::kWrongToken, grpc::StatusCode::PERMISSION_DENIED, "x"},
           {testing::kJobToken, grpc::StatusCode::ALREADY_EXISTS, "node-a"}}) {
    RawSession session(channel, token);
    v1::AgentMessage msg;
    *msg.mutable_join() = MakeJoin(node);
    msg.mutable_join()->set_session_secret(
        token.empty() ? "" : testing::kWrongToken);
    session.stream().Write(msg);
    session.stream().WritesDone();
    grpc::Status s = session.Finish();
    EXPECT_EQ(s.error_code(), code) << node << ": " << s.error_message();
  }

  // The real agent was not disturbed: still RUNNING in round 1, connected.
  auto status = QueryStatus(LoopbackEndpoint(server->port()), "jobA",
                            absl::Seconds(10), Tls(testing::kAdminToken));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->jobs_size(), 1);
  EXPECT_EQ(status->jobs(0).state(), "RUNNING");
  EXPECT_EQ(status->jobs(0).round(), 1);
  EXPECT_EQ(server->coordinator().ConnectedAgents(), 1);
  EXPECT_EQ(agent->Next(absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded)
      << "the agent heard something";
}

TEST_F(SecurityServerTest, GrpcStorePresentsTheRoundCredential) {
  auto server = StartServer(/*tls=*/true);
  ASSERT_NE(server, nullptr);
  auto agent = JoinedAgent(server->port());
  store::GrpcStoreOptions o;
  o.endpoint = LoopbackEndpoint(server->port());
  o.prefix = "jobA/1";
  o.security = Tls(DeriveStoreCredential(testing::kJobToken, "jobA/1"));
  auto store = store::NewGrpcStore(o);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  auto v = (*store)->Get("k", absl::Seconds(1));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");

  o.security.token = "";
  auto anonymous = store::NewGrpcStore(o);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ((*anonymous)->Set("k", "x").code(),
            absl::StatusCode::kUnauthenticated);
}

// Store.Stream checks the caller's credential per op, by each op's namespace,
// as the unary calls do.
TEST_F(SecurityServerTest, TheStoreStreamChecksTheCredentialPerNamespace) {
  auto server = StartServer(/*tls=*/true);
  ASSERT_NE(server, nullptr);
  auto agent = JoinedAgent(server->port());
  auto store = v1::Store::NewStub(RawTlsChannel(server->port()));
  auto op = [](uint64_t id, const std::string& prefix) {
    v1::StoreRequest r;
    r.set_id(id);
    r.set_prefix(prefix);
    r.mutable_set()->set_key("k");
    r.mutable_set()->set_value("v");
    return r;
  };
  for (const auto& [token, own, other] :
       std::vector<std::tuple<std::string, grpc::StatusCode, grpc::StatusCode>>{
           {"", grpc::StatusCode::UNAUTHENTICATED,
            grpc::StatusCode::UNAUTHENTICATED},
           {testing::kWrongToken, grpc::StatusCode::PERMISSION_DENIED,
            grpc::StatusCode::PERMISSION_DENIED},
           {DeriveStoreCredential(testing::kJobToken, "jobA/1"),
            grpc::StatusCode::OK, grpc::StatusCode::PERMISSION_DENIED}}) {
    grpc::ClientContext context;
    PrepareContext(&context, token);
    auto stream = store->Stream(&context);
    v1::StoreRequests batch;
    *batch.add_requests() = op(1, "jobA/1");
    *batch.add_requests() = op(2, "jobA/2");
    ASSERT_TRUE(stream->Write(batch));
    std::map<uint64_t, int> codes;
    v1::StoreResponses answers;
    while (codes.size() < 2 && stream->Read(&answers)) {
      for (const auto& a : answers.responses()) {
        codes[a.id()] = a.code();
        EXPECT_THAT(a.message(), Not(HasSubstr(testing::kJobToken)));
      }
    }
    EXPECT_EQ(codes[1], static_cast<int>(own)) << "token '" << token << "'";
    EXPECT_EQ(codes[2], static_cast<int>(other)) << "token '" << token << "'";
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
}

TEST_F(SecurityServerTest, ReloadSwapsTheCertificateForNewConnections) {
  const std::string dir = muster::testing::MakeTempDir("tls_reload");
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  auto copy = [](const std::string& from, const std::string& to) {
    std::ifstream in(from, std::ios::binary);
    std::ofstream out(to, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
  };
  copy(pki_->server_cert, cert);
  copy(pki_->server_key, key);
  ServerOptions options;
  options.tls.cert = cert;
  options.tls.key = key;
  auto server = StartLoopbackServer(options);
  ASSERT_NE(server, nullptr);
  const std::string endpoint = LoopbackEndpoint(server->port());
  store::ClientSecurity ca2;
  ca2.tls_ca = pki_->ca2_cert;
  ASSERT_TRUE(QueryStatus(endpoint, "", absl::Seconds(10), Tls()).ok());

  // A broken file is refused and the old certificate stays.
  { std::ofstream(cert, std::ios::trunc) << "garbage\n"; }
  EXPECT_EQ(server->ReloadTls().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(QueryStatus(endpoint, "", absl::Seconds(10), Tls()).ok());

  copy(pki_->server2_cert, cert);
  copy(pki_->server2_key, key);
  ASSERT_TRUE(server->ReloadTls().ok());
  // gRPC's watcher picks the copies up within a second or two.
  EXPECT_TRUE(muster::testing::WaitUntil(
      [&] { return QueryStatus(endpoint, "", absl::Seconds(2), ca2).ok(); },
      absl::Seconds(10), absl::Milliseconds(200)));
}

}  // namespace
}  // namespace muster::rendezvous
