#include "tests/doctor/netns.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/testing/subprocess.h"

namespace muster::testing {

std::string ToolPath(const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin",
                          "/usr/local/sbin", "/usr/local/bin"}) {
    std::string p = absl::StrCat(dir, "/", name);
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

int RunCommand(std::vector<std::string> argv, std::string* output,
               absl::Duration timeout) {
  std::string path = ToolPath(argv[0]);
  if (path.empty()) {
    if (output != nullptr) *output = absl::StrCat(argv[0], ": not found");
    return 127;
  }
  argv[0] = path;
  Subprocess p(argv);
  int rc = p.WaitOrKill(timeout);
  if (output != nullptr) *output = p.Output();
  return rc;
}

namespace {

constexpr const char* kPrefix = "mdoc";

std::string Probe() {
  if (geteuid() != 0) return "not root";
  for (const char* tool : {"ip", "iptables"}) {
    if (ToolPath(tool).empty()) return absl::StrCat("no ", tool, " command");
  }
  RemoveStaleNetns(kPrefix);
  auto pair = NetnsPair::Create();
  if (!pair.ok()) return std::string(pair.status().message());
  std::string out;
  absl::Status s = (*pair)->ExecIn((*pair)->b(), {"iptables", "-S"}, &out);
  if (!s.ok()) return absl::StrCat("iptables in a namespace: ", s.message());
  return "";
}

}  // namespace

void RemoveStaleNetns(const std::string& prefix) {
  std::string out;
  if (RunCommand({"ip", "netns", "list"}, &out, absl::Seconds(10)) != 0) return;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    absl::string_view name = line.substr(0, line.find(' '));
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, prefix)) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('_')), &pid)) continue;
    if (pid == getpid() || ProcessAlive(pid)) continue;
    RunCommand({"ip", "netns", "del", std::string(name)}, nullptr,
               absl::Seconds(10));
  }
}

std::string NetnsUnavailable() {
  static const std::string* reason = new std::string(Probe());
  return *reason;
}

absl::StatusOr<std::unique_ptr<NetnsPair>> NetnsPair::Create() {
  static std::atomic<int> counter{0};
  const int n = counter++;
  std::unique_ptr<NetnsPair> p(new NetnsPair());
  const std::string base = absl::StrCat(kPrefix, getpid(), "_", n);
  p->a_ = base + "a";
  p->b_ = base + "b";
  p->veth_a_ = absl::StrCat("md", getpid() % 10000000, "v", n % 100, "a");
  p->veth_b_ = absl::StrCat("md", getpid() % 10000000, "v", n % 100, "b");
  auto run = [](std::vector<std::string> argv) -> absl::Status {
    std::string out;
    int rc = RunCommand(argv, &out, absl::Seconds(20));
    if (rc != 0) {
      return absl::UnavailableError(
          absl::StrCat(absl::StrJoin(argv, " "), " exited ", rc, ": ", out));
    }
    return absl::OkStatus();
  };
  absl::Status s = run({"ip", "netns", "add", p->a_});
  if (!s.ok()) return s;
  p->created_a_ = true;
  s = run({"ip", "netns", "add", p->b_});
  if (!s.ok()) return s;
  p->created_b_ = true;
  s = run({"ip", "link", "add", p->veth_a_, "type", "veth", "peer", "name",
           p->veth_b_});
  if (!s.ok()) return s;
  p->created_veth_ = true;
  const std::vector<std::vector<std::string>> steps = {
      {"ip", "link", "set", p->veth_a_, "netns", p->a_},
      {"ip", "link", "set", p->veth_b_, "netns", p->b_},
      {"ip", "-n", p->a_, "addr", "add", "10.77.0.1/29", "dev", p->veth_a_},
      {"ip", "-n", p->b_, "addr", "add", "10.77.0.2/29", "dev", p->veth_b_},
      {"ip", "-n", p->a_, "addr", "add", "fd77::1/64", "dev", p->veth_a_,
       "nodad"},
      {"ip", "-n", p->b_, "addr", "add", "fd77::2/64", "dev", p->veth_b_,
       "nodad"},
      {"ip", "-n", p->a_, "link", "set", "lo", "up"},
      {"ip", "-n", p->b_, "link", "set", "lo", "up"},
      {"ip", "-n", p->a_, "link", "set", p->veth_a_, "up"},
      {"ip", "-n", p->b_, "link", "set", p->veth_b_, "up"},
  };
  for (const auto& step : steps) {
    s = run(step);
    if (!s.ok()) return s;
  }
  // Deterministic ICMP errors from b: no per-destination rate limit.
  for (const char* sysctl :
       {"net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0"}) {
    RunCommand(p->In(p->b_, {"sysctl", "-qw", sysctl}), nullptr,
               absl::Seconds(10));
  }
  return p;
}

NetnsPair::~NetnsPair() {
  // Deleting a namespace deletes the veth end inside it, and with it the
  // pair; iptables rules live and die with their namespace.
  if (created_a_) RunCommand({"ip", "netns", "del", a_}, nullptr);
  if (created_b_) RunCommand({"ip", "netns", "del", b_}, nullptr);
  if (created_veth_) {
    // Still in this namespace if moving it failed; an error otherwise.
    std::string ignored;
    RunCommand({"ip", "link", "del", veth_a_}, &ignored, absl::Seconds(10));
  }
}

std::vector<std::string> NetnsPair::In(const std::string& ns,
                                       std::vector<std::string> argv) const {
  std::vector<std::string> out = {ToolPath("ip"), "netns", "exec", ns};
  if (!argv.empty() && argv[0].find('/') == std::string::npos) {
    std::string path = ToolPath(argv[0]);
    if (!path.empty()) argv[0] = path;
  }
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status NetnsPair::ExecIn(const std::string& ns,
                               std::vector<std::string> argv,
                               std::string* output) const {
  std::string out;
  std::vector<std::string> full = In(ns, argv);
  int rc = RunCommand(full, &out, absl::Seconds(30));
  if (output != nullptr) *output = out;
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(full, " "), " exited ", rc, ": ", out));
  }
  return absl::OkStatus();
}

std::string NetnsPair::Path(const std::string& ns) const {
  return absl::StrCat("/run/netns/", ns);
}

}  // namespace muster::testing
