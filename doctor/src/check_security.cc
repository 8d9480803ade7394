// `muster doctor`'s security check: whether the job talks to musterd over TLS,
// and the mismatches that would make every agent fail (docs/security.md).
#include <string>

#include "absl/strings/str_cat.h"
#include "muster/doctor/checks.h"

namespace muster::doctor {

Check SecurityCheck(const std::string& endpoint, bool local, TlsAnswer server,
                    bool client_tls, bool has_token) {
  Check c;
  c.id = "security";
  c.title = absl::StrCat("TLS to ", endpoint);
  c.data = {{"endpoint", endpoint},
            {"server_tls", server == TlsAnswer::kTls},
            {"client_tls", client_tls},
            {"token", has_token},
            {"local", local}};
  switch (server) {
    case TlsAnswer::kUnknown:
      c.status = Status::kInfo;
      c.summary = "not checked: nothing answered at the endpoint";
      return c;
    case TlsAnswer::kTls:
      if (!client_tls) {
        c.status = Status::kFail;
        c.summary =
            "musterd speaks TLS but this job's agents would connect "
            "in plaintext";
        c.fix = {
            "Pass the CA that signed musterd's certificate: "
            "--rdzv-conf=tls_ca=CA.pem (or PET_RDZV_CONF)."};
        return c;
      }
      c.status = Status::kPass;
      c.summary = has_token ? "TLS, with a job token"
                            : "TLS (no job token: anyone who reaches musterd "
                              "can join token-less jobs)";
      return c;
    case TlsAnswer::kPlaintext:
      break;
  }
  if (client_tls) {
    c.status = Status::kFail;
    c.summary = "tls_ca is set but musterd speaks plaintext";
    c.fix = {
        "Start musterd with --tls-cert and --tls-key, or drop tls_ca "
        "from --rdzv-conf."};
    return c;
  }
  if (local) {
    c.status = Status::kPass;
    c.summary = "plaintext on this host only";
    return c;
  }
  c.status = Status::kWarn;
  c.summary = absl::StrCat(
      "the job talks to musterd without TLS across hosts: ",
      has_token ? "its token, " : "",
      "the Store keys its workers bootstrap from (Gloo addresses, NCCL ids) "
      "and its failure reports cross the network in clear");
  c.fix = {
      "Run musterd with --tls-cert/--tls-key (and --require-token), and "
      "give the agents --rdzv-conf=tls_ca=CA.pem and a job token "
      "(MUSTER_RDZV_TOKEN or token_file); docs/security.md shows the "
      "openssl commands."};
  return c;
}

}  // namespace muster::doctor
