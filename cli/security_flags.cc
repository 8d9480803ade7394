#include "cli/security_flags.h"

#include <string>
#include <utility>

#include "cli/rdzv_conf.h"
#include "muster/common/status.h"
#include "muster/rendezvous/auth.h"

namespace muster::cli {

absl::StatusOr<rendezvous::ClientSecurity> ClientSecurityFromFlags(
    const std::string& rdzv_conf, const std::string& token_file,
    const std::map<std::string, std::string>& env) {
  absl::StatusOr<RdzvConf> conf =
      ParseRdzvConf(rdzv_conf, RdzvConfScope::kSecurityOnly);
  if (!conf.ok()) return Annotate(conf.status(), "--rdzv-conf");
  rendezvous::ClientSecurity s;
  s.tls_ca = conf->tls_ca;
  s.tls_cert = conf->tls_cert;
  s.tls_key = conf->tls_key;
  const std::string& conf_token_file = conf->token_file;
  MUSTER_RETURN_IF_ERROR(Annotate(s.Validate(), "--rdzv-conf"));
  const std::string& file = token_file.empty() ? conf_token_file : token_file;
  if (!file.empty()) {
    MUSTER_ASSIGN_OR_RETURN(s.token, rendezvous::ReadTokenFile(file));
  } else if (auto it = env.find(rendezvous::kRdzvTokenEnv);
             it != env.end() && !it->second.empty()) {
    MUSTER_ASSIGN_OR_RETURN(
        s.token, rendezvous::CleanToken(it->second, rendezvous::kRdzvTokenEnv));
  }
  return s;
}

}  // namespace muster::cli
