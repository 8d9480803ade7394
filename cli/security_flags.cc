#include "cli/security_flags.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "muster/common/status.h"
#include "muster/rendezvous/auth.h"

namespace muster::cli {

absl::StatusOr<rendezvous::ClientSecurity> ClientSecurityFromFlags(
    const std::string& rdzv_conf, const std::string& token_file,
    const std::map<std::string, std::string>& env) {
  rendezvous::ClientSecurity s;
  std::string conf_token_file;
  for (absl::string_view item :
       absl::StrSplit(rdzv_conf, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string key =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(kv.first));
    const std::string value(absl::StripAsciiWhitespace(kv.second));
    std::string* field = key == "tls_ca"       ? &s.tls_ca
                         : key == "tls_cert"   ? &s.tls_cert
                         : key == "tls_key"    ? &s.tls_key
                         : key == "token_file" ? &conf_token_file
                                               : nullptr;
    if (field == nullptr) continue;
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-conf: ", key, "= needs a file path"));
    }
    *field = value;
  }
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
