// Fuzz target: the launcher's command line and environment parser. The input
// is split at NUL bytes into arguments, the first few of which may become
// PET_* environment variables. Parsing must return a value or an error, never
// crash, hang or throw; and an accepted command must be within the bounds the
// parser promises.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/launch_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(current);
  std::map<std::string, std::string> env;
  // Arguments that start with "PET_" and hold '=' go to the environment.
  std::vector<std::string> argv;
  for (const std::string& a : args) {
    const size_t eq = a.find('=');
    if (a.rfind("PET_", 0) == 0 && eq != std::string::npos) {
      env[a.substr(0, eq)] = a.substr(eq + 1);
    } else {
      argv.push_back(a);
    }
  }
  muster::cli::HostResources host;
  host.cpus = 2;
  host.gpus = 0;
  auto cmd = muster::cli::ParseLaunchCommand(argv, env, host);
  if (cmd.ok() && !cmd->show_help && !cmd->show_version) {
    const auto& c = cmd->config;
    if (c.nproc_per_node < 1 || c.nproc_per_node > 4096 || c.min_nodes < 1 ||
        c.max_nodes < c.min_nodes) {
      std::fprintf(stderr, "launch_flags_fuzz: accepted out-of-range values\n");
      std::abort();
    }
  }
  return 0;
}
