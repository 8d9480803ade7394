// Network namespaces for the doctor and probe tests: two namespaces joined by
// a veth pair, made by the test and removed by the guard's destructor, even
// when the test fails. Names carry the test's pid, so parallel runs never
// collide, and pairs left behind by a killed run (whose pid is gone) are
// removed by the next one.
//
//   auto pair = NetnsPair::Create();       // needs root; see Unavailable()
//   pair->ExecIn(pair->b(), {"iptables", "-A", "INPUT", ...});
//
// Topology: namespace a() has 10.77.0.1/29 and fd77::1/64, namespace b()
// 10.77.0.2/29 and fd77::2/64, on one link; 10.77.0.3 is on the link and
// unowned. b() answers with ICMP errors without rate limiting.
#ifndef MUSTER_TESTS_DOCTOR_NETNS_H_
#define MUSTER_TESTS_DOCTOR_NETNS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace muster::testing {

// The absolute path of a system tool (ip, iptables, unshare ...), or "".
std::string ToolPath(const std::string& name);

// Runs argv (argv[0] a tool name or a path) with a deadline. Returns its exit
// code, or -1 when it had to be killed; its output (stdout and stderr) goes to
// *output when not null.
int RunCommand(std::vector<std::string> argv, std::string* output = nullptr,
               absl::Duration timeout = absl::Seconds(30));

// Why this process cannot make network namespaces with veth pairs and
// iptables rules in them ("not root", "no ip command", ...), or "" when it
// can. Tries once and caches the answer.
std::string NetnsUnavailable();

// Removes the network namespaces named `prefix`<pid>_... whose process <pid>
// is gone (a killed run of a test left them): their addresses would collide
// with this run's. Best effort; each `ip` call is bounded.
void RemoveStaleNetns(const std::string& prefix);

class NetnsPair {
 public:
  static absl::StatusOr<std::unique_ptr<NetnsPair>> Create();
  ~NetnsPair();
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  static constexpr const char* kAddrA = "10.77.0.1";
  static constexpr const char* kAddrB = "10.77.0.2";
  static constexpr const char* kUnowned = "10.77.0.3";
  static constexpr const char* kAddr6A = "fd77::1";
  static constexpr const char* kAddr6B = "fd77::2";

  // argv prefixed with `ip netns exec NS`.
  std::vector<std::string> In(const std::string& ns,
                              std::vector<std::string> argv) const;
  // Runs argv in namespace ns; an error naming the command and its output
  // when it exits non-zero.
  absl::Status ExecIn(const std::string& ns, std::vector<std::string> argv,
                      std::string* output = nullptr) const;
  // The path of the namespace's handle (for setns).
  std::string Path(const std::string& ns) const;

 private:
  NetnsPair() = default;
  std::string a_, b_, veth_a_, veth_b_;
  bool created_a_ = false, created_b_ = false, created_veth_ = false;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_DOCTOR_NETNS_H_
