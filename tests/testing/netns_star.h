// Network namespaces in a star around the test's own namespace, for tests
// that cut one process off from some peers while others still reach it (the
// nemesis test cuts a musterd replica from etcd while its agents still talk
// to it). Spoke i is a namespace joined to this one by a veth pair: inside it
// has SpokeAddr(i) (10.78.<i+1>.2/24) and a default route to this namespace's
// end, 10.78.<i+1>.1. Processes in this namespace reach a spoke at its
// address; a spoke reaches a server in this namespace at HubAddr() (the first
// spoke's host-side address: the kernel accepts a packet for any local
// address on any interface). iptables rules made inside a spoke die with it.
//
//   if (std::string why = NetnsUnavailable(); why.empty()) {
//     auto star = NetnsStar::Create(3);
//     Subprocess p(star.value()->In(0, {"musterd", ...}));
//   }
//
// Needs root (NetnsUnavailable in tests/doctor/netns.h says why not). Names
// carry the pid; spokes left behind by a killed run (pid gone) are removed by
// the next Create. Not thread-safe.
#ifndef MUSTER_TESTS_TESTING_NETNS_STAR_H_
#define MUSTER_TESTS_TESTING_NETNS_STAR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muster::testing {

class NetnsStar {
 public:
  // Makes `spokes` namespaces (at most 200). Errors: UNAVAILABLE naming the
  // `ip` command that failed (what was made is removed again).
  static absl::StatusOr<std::unique_ptr<NetnsStar>> Create(int spokes);
  // Deletes the namespaces (their veth pairs and iptables rules with them).
  ~NetnsStar();
  NetnsStar(const NetnsStar&) = delete;
  NetnsStar& operator=(const NetnsStar&) = delete;

  int size() const { return static_cast<int>(names_.size()); }
  const std::string& name(int i) const { return names_[i]; }
  // Spoke i's address, reachable from this namespace.
  static std::string SpokeAddr(int i);
  // This namespace's address that every spoke reaches.
  static std::string HubAddr();
  // argv prefixed with `ip netns exec <spoke i>` (ip execs it: the child's
  // pid is the program's own, so signals reach it directly).
  std::vector<std::string> In(int i, std::vector<std::string> argv) const;
  // Runs argv in spoke i within 30 s; an error naming it and its output when
  // it fails.
  absl::Status ExecIn(int i, std::vector<std::string> argv) const;

 private:
  NetnsStar() = default;
  std::vector<std::string> names_;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_NETNS_STAR_H_
