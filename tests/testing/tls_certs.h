// Certificates made at test time with the `openssl` command line: a CA, a
// server certificate for 127.0.0.1/localhost, a client certificate, and a
// second CA with its own server certificate (for reloads and wrong-CA cases).
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

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_TLS_CERTS_H_
