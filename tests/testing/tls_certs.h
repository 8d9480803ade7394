// Certificates made at test time with the `openssl` command line: a CA, a
// server certificate for 127.0.0.1/localhost, a client certificate, and a
// second CA with its own server certificate (for reloads and wrong-CA cases);
// and the tokens of the token checks' tests.
#ifndef MUSTER_TESTS_TESTING_TLS_CERTS_H_
#define MUSTER_TESTS_TESTING_TLS_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace muster::testing {

struct TestPki {
  std::string dir;
  std::string ca_cert, ca_key;
  std::string server_cert, server_key;    // signed by ca, SAN 127.0.0.1
  std::string client_cert, client_key;    // signed by ca
  std::string ca2_cert;                   // another CA
  std::string server2_cert, server2_key;  // signed by ca2, SAN 127.0.0.1
};

// Makes them under `dir` (which must exist). Errors: INTERNAL with the
// command that failed and its output. Takes about a second (EC P-256 keys).
absl::StatusOr<TestPki> MakeTestPki(const std::string& dir);

// Credentials for the token checks' tests: a job's token, the admin token and
// one that is neither. Distinctive, so that a test can search logs, status
// output and workers' environments for them.
inline constexpr char kJobToken[] = "e2e-job-token-5f0c3a9e1b7d4c2a8e6f";
inline constexpr char kAdminToken[] = "e2e-admin-token-9a8b7c6d5e4f3a2b1c0d";
inline constexpr char kWrongToken[] = "e2e-wrong-token-00112233445566778899";

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_TLS_CERTS_H_
