// Signal names on Windows: the numbers of signals.h. See README.md.
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "muster/platform/signals.h"

namespace muster::platform {
namespace {
struct Named {
  int number;
  const char* name;
};
constexpr Named kNames[] = {{kSignalHangup, "HUP"},
                            {kSignalInterrupt, "INT"},
                            {kSignalQuit, "QUIT"},
                            {kSignalKill, "KILL"},
                            {kSignalTerminate, "TERM"}};
}  // namespace

std::string SignalName(int signal) {
  for (const Named& n : kNames) {
    if (n.number == signal) return absl::StrCat("SIG", n.name);
  }
  return absl::StrCat("signal ", signal);
}

int SignalNumber(const std::string& name) {
  std::string n = absl::AsciiStrToUpper(name);
  if (absl::StartsWith(n, "SIG")) n = n.substr(3);
  for (const Named& k : kNames) {
    if (n == k.name) return k.number;
  }
  return -1;
}

}  // namespace muster::platform
