#include "cli/subcommand.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace muster::cli {

std::optional<int> ParseSubcommandArgs(CLI::App& app,
                                       const std::vector<std::string>& args,
                                       absl::string_view name, int usage_exit,
                                       absl::string_view hint) {
  // CLI11 consumes its argument vector from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fputs(absl::StrCat(name, ": ", e.what(), hint, "\n").c_str(), stderr);
    return usage_exit;
  }
  return std::nullopt;
}

}  // namespace muster::cli
