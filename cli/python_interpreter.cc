#include "cli/python_interpreter.h"

#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"

namespace muster::cli {
namespace {

// A program that prints the interpreter's own path and nothing else, whatever
// the user's site customisation prints to stderr.
constexpr char kPrintExecutable[] =
    "import sys; sys.stdout.write(sys.executable or '')";

}  // namespace

absl::StatusOr<std::string> ResolvePython(
    const std::string& python, const std::map<std::string, std::string>& env,
    absl::Duration timeout) {
  platform::CommandSpec spec;
  // Found in the launcher's PATH, which is the workers' too. The launcher
  // blocks its stop signals before any thread starts; the probe gets a clean
  // mask.
  spec.argv = {python, "-c", kPrintExecutable};
  spec.env = env;
  spec.timeout = timeout;
  absl::StatusOr<platform::CommandResult> result = platform::RunCommand(spec);
  if (!result.ok()) return result.status();
  if (result->timed_out) {
    return absl::FailedPreconditionError(absl::StrCat(
        python, " did not answer within ", absl::FormatDuration(timeout)));
  }
  if (result->exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        python, " failed to start (",
        result->signal == 0 ? absl::StrCat("exit code ", result->exit_code)
                            : absl::StrCat("signal ", result->signal),
        ")"));
  }
  const std::string& out = result->output;
  std::string path(absl::StripAsciiWhitespace(out));
  if (path.empty() || !std::filesystem::path(path).is_absolute()) {
    return absl::FailedPreconditionError(absl::StrCat(
        python, " did not name its executable (sys.executable is empty)"));
  }
  return path;
}

std::string ResolvePythonInterpreter(
    agent::AgentConfig* config, const std::map<std::string, std::string>& env) {
  if (config->python_interpreter.empty() || config->program.empty()) return "";
  const std::string given = config->python_interpreter;
  auto path_it = env.find("PATH");
  absl::StatusOr<std::string> found = platform::FindExecutable(
      given, path_it != env.end() ? path_it->second : std::string());
  const std::string located = found.ok() ? *found : given;
  absl::StatusOr<std::string> real =
      ResolvePython(given, env, absl::Seconds(20));
  const std::string how =
      absl::StrCat("choose another with --python=PATH or PYTHON_EXEC=PATH");
  if (!real.ok()) {
    return absl::StrCat(
        "workers run Python ", located, " (", config->python_source,
        "), which could not be asked for its path: ", real.status().message(),
        "; ", how);
  }
  config->python_interpreter = *real;
  config->program[0] = *real;
  std::string via;
  if (*real != located) via = absl::StrCat(", via ", located);
  return absl::StrCat("workers run Python ", *real, " (", config->python_source,
                      via, "); ", how);
}

}  // namespace muster::cli
