#include "muster/platform/signals.h"

#include <signal.h>
#include <string.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace muster::platform {

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", signal);
}

int SignalNumber(const std::string& name) {
  std::string n = absl::AsciiStrToUpper(name);
  if (absl::StartsWith(n, "SIG")) n = n.substr(3);
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev != nullptr && n == abbrev) return sig;
  }
  return -1;
}

std::string DescribeExitCode(int exit_code) {
  return absl::StrCat("exited with code ", exit_code);
}

}  // namespace muster::platform
