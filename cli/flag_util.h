// Small pieces shared by the launcher's flag table (cli/launch_flag_table.h)
// and the rdzv-conf parser (cli/rdzv_conf.h): how a value is named in an
// error, boolean and integer words, and the distance behind "did you mean".
#ifndef MUSTER_CLI_FLAG_UTIL_H_
#define MUSTER_CLI_FLAG_UTIL_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace muster::cli {

// A value as the user gave it, and where: "--nnodes" or "PET_NNODES". Errors
// name `source`, because a bad PET_ variable is otherwise a mystery to someone
// who typed no such flag.
struct Given {
  std::string value;
  std::string source;
};

// INVALID_ARGUMENT "<source>=<value>: <why>".
absl::Status BadValue(const Given& g, absl::string_view why);

// 1/true/yes/on and 0/false/no/off, any case; -1 is false too (CLI11's
// spelling of --flag=false). nullopt for anything else.
std::optional<bool> ParseBool(absl::string_view text);

// A whole number, white space around it ignored; nullopt if not one.
std::optional<int> ParseInt(absl::string_view text);

// Optimal string alignment distance (insertions, deletions, substitutions,
// adjacent transpositions), for "did you mean".
int EditDistance(absl::string_view a, absl::string_view b);

}  // namespace muster::cli

#endif  // MUSTER_CLI_FLAG_UTIL_H_
