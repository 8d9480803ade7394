// HTTPS on the HTTP listener (musterd's --http-listen with --tls-cert): the
// server answers over TLS with the given certificate and only over TLS;
// a reload switches to a new pair for new connections and keeps the old one
// when the new files are bad; bad files are refused naming the file.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/http_server.h"
#include "tests/testing/files.h"
#include "tests/testing/http.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"

namespace muster {
namespace {

using ::muster::testing::HttpBody;
using ::muster::testing::HttpGet;
using ::muster::testing::HttpsGet;
using ::muster::testing::HttpStatusCode;
using ::testing::HasSubstr;
using ::testing::StartsWith;

void Copy(const std::string& from, const std::string& to) {
  testing::WriteFile(to, testing::ReadFile(from), 0600);
}

class HttpsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("https");
    absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir_);
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
  }
  absl::StatusOr<std::unique_ptr<HttpServer>> Serve(const std::string& cert,
                                                    const std::string& key) {
    return HttpServer::Start(
        "127.0.0.1:0",
        {{"/healthz",
          [](const HttpRequest& r) {
            return HttpResponse{200, "text/plain", "ok " + r.Header("x-who")};
          }}},
        HttpTlsFiles{cert, key});
  }

  std::string dir_;
  testing::TestPki pki_;
};

TEST_F(HttpsServerTest, ServesOverTlsOnly) {
  auto server = Serve(pki_.server_cert, pki_.server_key);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->tls());
  const int port = (*server)->port();
  const std::string r =
      HttpsGet(port, "/healthz", pki_.ca_cert, "X-Who: test\r\n");
  EXPECT_EQ(HttpStatusCode(r), 200) << r;
  EXPECT_EQ(HttpBody(r), "ok test");
  // The certificate is the server's: another CA does not verify it.
  EXPECT_THAT(HttpsGet(port, "/healthz", pki_.ca2_cert),
              StartsWith("TLS error:"));
  // Plain HTTP gets no answer (a token in a header never goes in clear).
  EXPECT_EQ(HttpStatusCode(HttpGet(port, "/healthz")), 0);
}

TEST_F(HttpsServerTest, ReloadTakesANewPairAndKeepsTheOldOneOnError) {
  const std::string cert = dir_ + "/live-cert.pem";
  const std::string key = dir_ + "/live-key.pem";
  Copy(pki_.server_cert, cert);
  Copy(pki_.server_key, key);
  auto server = Serve(cert, key);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_EQ(HttpStatusCode(HttpsGet(port, "/healthz", pki_.ca_cert)), 200);

  // A key that does not match: refused, the old pair serves on.
  Copy(pki_.server2_cert, cert);
  absl::Status bad = (*server)->ReloadTls();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("does not match"));
  EXPECT_EQ(HttpStatusCode(HttpsGet(port, "/healthz", pki_.ca_cert)), 200);

  // The whole new pair: new connections get it.
  Copy(pki_.server2_key, key);
  ASSERT_TRUE((*server)->ReloadTls().ok());
  EXPECT_EQ(HttpStatusCode(HttpsGet(port, "/healthz", pki_.ca2_cert)), 200);
  EXPECT_THAT(HttpsGet(port, "/healthz", pki_.ca_cert),
              StartsWith("TLS error:"));
}

TEST_F(HttpsServerTest, BadFilesAreRefusedNamingTheFile) {
  auto missing = Serve(dir_ + "/nope.pem", pki_.server_key);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ + "/nope.pem"));
  auto not_a_key = Serve(pki_.server_cert, pki_.server_cert);
  EXPECT_EQ(not_a_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_a_key.status().message(), HasSubstr("no PEM private key"));
  auto mismatch = Serve(pki_.server_cert, pki_.server2_key);
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.status().message(), HasSubstr("does not match"));
}

TEST(HttpServerTlsTest, PlainServerHasNoTlsToReload) {
  auto server = HttpServer::Start("127.0.0.1:0", {});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE((*server)->tls());
  EXPECT_EQ((*server)->ReloadTls().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace muster
