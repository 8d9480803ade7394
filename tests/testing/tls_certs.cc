#include "tests/testing/tls_certs.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace muster::testing {
namespace {

absl::Status Run(const std::string& command, const std::string& log) {
  const std::string full = absl::StrCat(command, " >>", log, " 2>&1");
  if (std::system(full.c_str()) != 0) {
    std::ifstream in(log);
    std::stringstream out;
    out << in.rdbuf();
    return absl::InternalError(
        absl::StrCat("`", command, "` failed:\n", out.str()));
  }
  return absl::OkStatus();
}

// An EC P-256 private key at p.key.
absl::Status MakeKey(const std::string& p, const std::string& log) {
  return Run(
      absl::StrCat("openssl ecparam -name prime256v1 -genkey -noout -out ", p,
                   ".key"),
      log);
}

// A key and a certificate signed by ca_cert/ca_key, for 127.0.0.1/localhost.
absl::Status MakeLeaf(const std::string& dir, const std::string& name,
                      const std::string& cn, const std::string& ca_cert,
                      const std::string& ca_key, bool server,
                      const std::string& log) {
  const std::string ext = absl::StrCat(dir, "/", name, ".ext");
  {
    std::ofstream f(ext);
    if (server) {
      f << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
           "extendedKeyUsage=serverAuth\n";
    } else {
      f << "extendedKeyUsage=clientAuth\n";
    }
  }
  const std::string p = absl::StrCat(dir, "/", name);
  if (absl::Status s = MakeKey(p, log); !s.ok()) return s;
  if (absl::Status s =
          Run(absl::StrCat("openssl req -new -key ", p, ".key -subj /CN=", cn,
                           " -out ", p, ".csr"),
              log);
      !s.ok())
    return s;
  return Run(absl::StrCat("openssl x509 -req -in ", p, ".csr -CA ", ca_cert,
                          " -CAkey ", ca_key, " -CAcreateserial -days 2 -out ",
                          p, ".crt -extfile ", ext),
             log);
}

absl::Status MakeCa(const std::string& p, const std::string& cn,
                    const std::string& log) {
  if (absl::Status s = MakeKey(p, log); !s.ok()) return s;
  return Run(absl::StrCat("openssl req -x509 -new -key ", p,
                          ".key -subj /CN=", cn, " -days 2 -out ", p, ".crt"),
             log);
}

}  // namespace

absl::StatusOr<TestPki> MakeTestPki(const std::string& dir) {
  const std::string log = absl::StrCat(dir, "/openssl.log");
  TestPki pki;
  pki.dir = dir;
  pki.ca_cert = dir + "/ca.crt";
  pki.ca_key = dir + "/ca.key";
  pki.server_cert = dir + "/server.crt";
  pki.server_key = dir + "/server.key";
  pki.client_cert = dir + "/client.crt";
  pki.client_key = dir + "/client.key";
  pki.ca2_cert = dir + "/ca2.crt";
  pki.server2_cert = dir + "/server2.crt";
  pki.server2_key = dir + "/server2.key";
  if (absl::Status s = MakeCa(dir + "/ca", "muster-test-ca", log); !s.ok())
    return s;
  if (absl::Status s = MakeCa(dir + "/ca2", "muster-test-ca2", log); !s.ok())
    return s;
  if (absl::Status s = MakeLeaf(dir, "server", "musterd", pki.ca_cert,
                                pki.ca_key, true, log);
      !s.ok())
    return s;
  if (absl::Status s =
          MakeLeaf(dir, "client", "agent", pki.ca_cert, pki.ca_key, false, log);
      !s.ok())
    return s;
  if (absl::Status s = MakeLeaf(dir, "server2", "musterd", pki.ca2_cert,
                                dir + "/ca2.key", true, log);
      !s.ok())
    return s;
  return pki;
}

}  // namespace muster::testing
