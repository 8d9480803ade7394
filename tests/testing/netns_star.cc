#include "tests/testing/netns_star.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/doctor/netns.h"
#include "tests/testing/subprocess.h"

namespace muster::testing {
namespace {

constexpr char kPrefix[] = "mstar";

absl::Status Run(const std::vector<std::string>& argv) {
  std::string out;
  const int rc = RunCommand(argv, &out, absl::Seconds(30));
  if (rc == 0) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(absl::StrJoin(argv, " "), " exited ", rc, ": ", out));
}

}  // namespace

std::string NetnsStar::SpokeAddr(int i) {
  return absl::StrCat("10.78.", i + 1, ".2");
}

std::string NetnsStar::HubAddr() { return "10.78.1.1"; }

absl::StatusOr<std::unique_ptr<NetnsStar>> NetnsStar::Create(int spokes) {
  if (spokes < 1 || spokes > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("NetnsStar: ", spokes, " spokes (1 to 200)"));
  }
  RemoveStaleNetns(kPrefix);
  std::unique_ptr<NetnsStar> star(new NetnsStar());
  for (int i = 0; i < spokes; ++i) {
    const std::string ns = absl::StrCat(kPrefix, getpid(), "_", i);
    // Interface names: at most 15 characters.
    const std::string hub_end = absl::StrCat("ms", getpid() % 1000000, "h", i);
    const std::string spoke_end =
        absl::StrCat("ms", getpid() % 1000000, "s", i);
    const std::string net = absl::StrCat("10.78.", i + 1, ".");
    absl::Status s = Run({"ip", "netns", "add", ns});
    if (!s.ok()) return s;
    star->names_.push_back(ns);  // from here on the destructor removes it
    const std::vector<std::vector<std::string>> steps = {
        {"ip", "link", "add", hub_end, "type", "veth", "peer", "name",
         spoke_end},
        {"ip", "link", "set", spoke_end, "netns", ns},
        {"ip", "addr", "add", net + "1/24", "dev", hub_end},
        {"ip", "link", "set", hub_end, "up"},
        {"ip", "-n", ns, "addr", "add", net + "2/24", "dev", spoke_end},
        {"ip", "-n", ns, "link", "set", "lo", "up"},
        {"ip", "-n", ns, "link", "set", spoke_end, "up"},
        {"ip", "-n", ns, "route", "add", "default", "via", net + "1"},
    };
    for (const auto& step : steps) {
      s = Run(step);
      if (!s.ok()) {
        std::string ignored;  // absent when the pair was moved already
        RunCommand({"ip", "link", "del", hub_end}, &ignored, absl::Seconds(10));
        return s;
      }
    }
  }
  return star;
}

NetnsStar::~NetnsStar() {
  // Deleting a namespace deletes the veth end inside it, and with it the
  // pair's other end here; iptables rules live and die with their namespace.
  for (const std::string& ns : names_) {
    RunCommand({"ip", "netns", "del", ns}, nullptr, absl::Seconds(10));
  }
}

std::vector<std::string> NetnsStar::In(int i,
                                       std::vector<std::string> argv) const {
  std::vector<std::string> out = {ToolPath("ip"), "netns", "exec", names_[i]};
  if (!argv.empty() && argv[0].find('/') == std::string::npos) {
    const std::string path = ToolPath(argv[0]);
    if (!path.empty()) argv[0] = path;
  }
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status NetnsStar::ExecIn(int i, std::vector<std::string> argv) const {
  return Run(In(i, std::move(argv)));
}

}  // namespace muster::testing
