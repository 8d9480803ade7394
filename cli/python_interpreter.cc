#include "cli/python_interpreter.h"

#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "muster/platform/env.h"
#include "muster/platform/launch_os.h"
#include "muster/platform/process.h"

namespace muster::cli {
namespace os = platform::os;
namespace {

// A program that prints the interpreter's own path, then on a second line
// "muster" when it finds the package muster with muster.torch (the current
// directory left out of its path: the workers' first entry is their
// script's directory instead), whatever the user's site customisation prints
// to stderr.
constexpr char kProbe[] =
    "import sys, os, importlib.util as u\n"
    "sys.stdout.write(sys.executable or '')\n"
    "sys.path = [p for p in sys.path if p not in ('', os.getcwd())]\n"
    "try:\n"
    "  s = u.find_spec('muster')\n"
    "  found = any(os.path.isfile(os.path.join(d, 'torch.py'))\n"
    "              for d in (s.submodule_search_locations or []))\n"
    "except Exception:\n"
    "  found = False\n"
    "sys.stdout.write('\\nmuster' if found else '\\n')\n";

}  // namespace

absl::StatusOr<PythonFacts> ResolvePython(
    const std::string& python, const std::map<std::string, std::string>& env,
    absl::Duration timeout) {
  platform::CommandSpec spec;
  // Found in the launcher's PATH, which is the workers' too. The launcher
  // blocks its stop signals before any thread starts; the probe gets a clean
  // mask.
  spec.argv = {python, "-c", kProbe};
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
  const size_t eol = out.find('\n');
  PythonFacts facts;
  facts.executable =
      std::string(absl::StripAsciiWhitespace(out.substr(0, eol)));
  if (facts.executable.empty() ||
      !std::filesystem::path(facts.executable).is_absolute()) {
    return absl::FailedPreconditionError(absl::StrCat(
        python, " did not name its executable (sys.executable is empty)"));
  }
  facts.finds_muster =
      eol != std::string::npos &&
      absl::StripAsciiWhitespace(out.substr(eol + 1)) == "muster";
  return facts;
}

std::string ResolvePythonInterpreter(
    agent::AgentConfig* config, const std::map<std::string, std::string>& env,
    bool* finds_muster) {
  if (finds_muster != nullptr) *finds_muster = false;
  if (config->python_interpreter.empty() || config->program.empty()) return "";
  const std::string given = config->python_interpreter;
  auto path_it = env.find("PATH");
  absl::StatusOr<std::string> found = platform::FindExecutable(
      given, path_it != env.end() ? path_it->second : std::string());
  const std::string located = found.ok() ? *found : given;
  absl::StatusOr<PythonFacts> real =
      ResolvePython(given, env, absl::Seconds(20));
  const std::string how =
      absl::StrCat("choose another with --python=PATH or PYTHON_EXEC=PATH");
  if (!real.ok()) {
    return absl::StrCat(
        "workers run Python ", located, " (", config->python_source,
        "), which could not be asked for its path: ", real.status().message(),
        "; ", how);
  }
  if (finds_muster != nullptr) *finds_muster = real->finds_muster;
  config->python_interpreter = real->executable;
  config->program[0] = real->executable;
  std::string via;
  if (real->executable != located) via = absl::StrCat(", via ", located);
  return absl::StrCat("workers run Python ", real->executable, " (",
                      config->python_source, via, "); ", how);
}

std::string MusterPythonDir(const std::string& launcher_path) {
  if (launcher_path.empty()) return "";
  const std::filesystem::path dir =
      std::filesystem::path(launcher_path).parent_path().parent_path() / "lib" /
      "muster" / "python";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir / "muster" / "torch.py", ec)) {
    return "";
  }
  return std::filesystem::weakly_canonical(dir, ec).string();
}

std::optional<std::string> WorkerPythonPath(
    const std::optional<std::string>& current, const std::string& dir,
    bool runs_python, bool finds_muster) {
  if (dir.empty() || (runs_python && finds_muster)) return std::nullopt;
  if (!current.has_value() || current->empty()) return dir;
  for (absl::string_view entry :
       absl::StrSplit(*current, os::kPathListSeparator)) {
    if (entry == dir) return std::nullopt;
  }
  return absl::StrCat(*current, std::string(1, os::kPathListSeparator), dir);
}

}  // namespace muster::cli
