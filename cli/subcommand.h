// What the one-shot subcommands (`muster status`, `muster doctor`) share when
// they read their command line with CLI11.
#ifndef MUSTER_CLI_SUBCOMMAND_H_
#define MUSTER_CLI_SUBCOMMAND_H_

#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"

namespace muster::cli {

// Parses `args` (the words after the subcommand's name) with `app`. Returns
// nullopt when the subcommand should go on, else the exit code it should
// return: 0 after printing the help to stdout for --help, `usage_exit` after
// printing "<name>: <CLI11's message><hint>" to stderr for a bad command line.
std::optional<int> ParseSubcommandArgs(CLI::App& app,
                                       const std::vector<std::string>& args,
                                       absl::string_view name, int usage_exit,
                                       absl::string_view hint = "");

}  // namespace muster::cli

#endif  // MUSTER_CLI_SUBCOMMAND_H_
