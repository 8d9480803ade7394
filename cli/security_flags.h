// The client side of docs/security.md for the one-shot commands (`muster
// status`, `muster stacks`, `muster doctor`): TLS files and a token from
// --rdzv-conf (or PET_RDZV_CONF), --token-file and MUSTER_RDZV_TOKEN; and the
// flags that say where musterd is and how to reach it, which `status` and
// `stacks` share.
#ifndef MUSTER_CLI_SECURITY_FLAGS_H_
#define MUSTER_CLI_SECURITY_FLAGS_H_

#include <map>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "muster/store/security.h"

namespace muster::cli {

// rdzv_conf: "KEY=VALUE,..." as the launcher takes it; only tls_ca, tls_cert,
// tls_key and token_file are read (the launcher's other keys are ignored, so
// the same PET_RDZV_CONF serves both). token_file: --token-file (wins over
// rdzv-conf's token_file, which wins over MUSTER_RDZV_TOKEN). Errors:
// INVALID_ARGUMENT / NOT_FOUND naming the setting or file (never a token).
absl::StatusOr<store::ClientSecurity> ClientSecurityFromFlags(
    const std::string& rdzv_conf, const std::string& token_file,
    const std::map<std::string, std::string>& env);

// Where musterd is and how to reach it: what a one-shot command asks of it.
struct ServerFlags {
  std::string endpoint = "127.0.0.1:29400";  // --rdzv-endpoint
  std::string rdzv_conf;                     // --rdzv-conf
  std::string token_file;                    // --token-file
};

// Adds --rdzv-endpoint (default PET_RDZV_ENDPOINT, else 127.0.0.1:29400) with
// `help` to `app`, bound to flags->endpoint.
void AddEndpointFlag(CLI::App& app,
                     const std::map<std::string, std::string>& env,
                     const std::string& help, ServerFlags* flags);

// Adds --rdzv-conf (default PET_RDZV_CONF) and --token-file (with
// `token_help`) to `app`, bound to `flags`.
void AddSecurityFlags(CLI::App& app,
                      const std::map<std::string, std::string>& env,
                      const std::string& token_help, ServerFlags* flags);

// ClientSecurityFromFlags over `flags`; on an error prints "<command>:
// <message>" to stderr and returns nullopt (the caller exits with a
// configuration error).
std::optional<store::ClientSecurity> SecurityOrComplain(
    const ServerFlags& flags, const std::map<std::string, std::string>& env,
    const char* command);

}  // namespace muster::cli

#endif  // MUSTER_CLI_SECURITY_FLAGS_H_
