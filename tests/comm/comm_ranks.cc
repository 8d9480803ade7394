#include "tests/comm/comm_ranks.h"

#include <map>
#include <regex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/common/net.h"

namespace muster::comm_testing {

int FailedAfterMs(const std::string& output, int rank) {
  const std::regex re(
      absl::StrCat("rank ", rank, R"(/\d+: AllReduce failed after (\d+) ms)"));
  std::smatch m;
  int ms = -1;
  if (std::regex_search(output, m, re)) (void)absl::SimpleAtoi(m[1].str(), &ms);
  return ms;
}

std::vector<std::unique_ptr<testing::Subprocess>> StartOnServedPort(
    int world_size, const StartRank& start, absl::Duration bind_timeout) {
  constexpr int kTries = 10;
  std::vector<std::unique_ptr<testing::Subprocess>> procs;
  int port = 0;
  for (int attempt = 1; attempt <= kTries; ++attempt) {
    port = testing::FreePort();
    procs.clear();
    procs.push_back(start(0, port));
    testing::Subprocess& rank0 = *procs[0];
    const std::string owner = absl::StrCat("pid ", rank0.pid(), " ");
    const bool bound = testing::WaitUntil(
        [&] {
          return !rank0.Running() ||
                 absl::StartsWith(DescribePortOwner(port), owner);
        },
        bind_timeout, absl::Milliseconds(50));
    if (bound && !rank0.Running() && attempt < kTries &&
        absl::StrContains(rank0.Output(), "cannot listen")) {
      continue;  // Someone else took the port first: another one.
    }
    break;
  }
  for (int r = 1; r < world_size; ++r) procs.push_back(start(r, port));
  return procs;
}

std::vector<std::unique_ptr<testing::Subprocess>> StartTcpWorkers(
    int world_size, const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env) {
  return StartOnServedPort(world_size, [&](int rank, int port) {
    std::vector<std::string> argv = {
        testing::BinPath("comm_worker"),
        absl::StrCat("--init=tcp://127.0.0.1:", port),
        absl::StrCat("--rank=", rank),
        absl::StrCat("--world-size=", world_size)};
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> full = testing::EnvWithoutLauncher();
    for (const auto& [k, v] : env) full[k] = v;
    return std::make_unique<testing::Subprocess>(std::move(argv),
                                                 std::move(full));
  });
}

}  // namespace muster::comm_testing
