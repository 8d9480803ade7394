// The client side of docs/security.md for the one-shot commands (`muster
// status`, `muster doctor`): TLS files and a token from --rdzv-conf (or
// PET_RDZV_CONF), --token-file and MUSTER_RDZV_TOKEN.
#ifndef MUSTER_CLI_SECURITY_FLAGS_H_
#define MUSTER_CLI_SECURITY_FLAGS_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "muster/rendezvous/security.h"

namespace muster::cli {

// rdzv_conf: "KEY=VALUE,..." as the launcher takes it; only tls_ca, tls_cert,
// tls_key and token_file are read (the launcher's other keys are ignored, so
// the same PET_RDZV_CONF serves both). token_file: --token-file (wins over
// rdzv-conf's token_file, which wins over MUSTER_RDZV_TOKEN). Errors:
// INVALID_ARGUMENT / NOT_FOUND naming the setting or file (never a token).
absl::StatusOr<rendezvous::ClientSecurity> ClientSecurityFromFlags(
    const std::string& rdzv_conf, const std::string& token_file,
    const std::map<std::string, std::string>& env);

}  // namespace muster::cli

#endif  // MUSTER_CLI_SECURITY_FLAGS_H_
