#include "cli/security_flags.h"

#include <cstdio>
#include <string>
#include <utility>

#include "cli/rdzv_conf.h"
#include "muster/common/status.h"
#include "muster/rendezvous/auth.h"

namespace muster::cli {

absl::StatusOr<store::ClientSecurity> ClientSecurityFromFlags(
    const std::string& rdzv_conf, const std::string& token_file,
    const std::map<std::string, std::string>& env) {
  absl::StatusOr<RdzvConf> conf =
      ParseRdzvConf(rdzv_conf, RdzvConfScope::kSecurityOnly);
  if (!conf.ok()) return Annotate(conf.status(), "--rdzv-conf");
  store::ClientSecurity s;
  s.tls_ca = conf->tls_ca;
  s.tls_cert = conf->tls_cert;
  s.tls_key = conf->tls_key;
  const std::string& conf_token_file = conf->token_file;
  MUSTER_RETURN_IF_ERROR(Annotate(s.Validate(), "--rdzv-conf"));
  const std::string& file = token_file.empty() ? conf_token_file : token_file;
  if (!file.empty()) {
    MUSTER_ASSIGN_OR_RETURN(s.token, rendezvous::ReadTokenFile(file));
  } else if (auto it = env.find(store::kRdzvTokenEnv);
             it != env.end() && !it->second.empty()) {
    MUSTER_ASSIGN_OR_RETURN(
        s.token, rendezvous::CleanToken(it->second, store::kRdzvTokenEnv));
  }
  return s;
}

void AddEndpointFlag(CLI::App& app,
                     const std::map<std::string, std::string>& env,
                     const std::string& help, ServerFlags* flags) {
  if (auto it = env.find("PET_RDZV_ENDPOINT");
      it != env.end() && !it->second.empty()) {
    flags->endpoint = it->second;
  }
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", flags->endpoint, help)
      ->capture_default_str();
}

void AddSecurityFlags(CLI::App& app,
                      const std::map<std::string, std::string>& env,
                      const std::string& token_help, ServerFlags* flags) {
  if (auto it = env.find("PET_RDZV_CONF"); it != env.end()) {
    flags->rdzv_conf = it->second;
  }
  app.add_option("--rdzv-conf,--rdzv_conf", flags->rdzv_conf,
                 "tls_ca=PEM,tls_cert=PEM,tls_key=PEM,token_file=FILE (TLS to "
                 "musterd, and the job's token; docs/security.md)");
  app.add_option("--token-file", flags->token_file, token_help);
}

std::optional<store::ClientSecurity> SecurityOrComplain(
    const ServerFlags& flags, const std::map<std::string, std::string>& env,
    const char* command) {
  absl::StatusOr<store::ClientSecurity> security =
      ClientSecurityFromFlags(flags.rdzv_conf, flags.token_file, env);
  if (!security.ok()) {
    std::fprintf(stderr, "%s: %s\n", command,
                 std::string(security.status().message()).c_str());
    return std::nullopt;
  }
  return *std::move(security);
}

}  // namespace muster::cli
