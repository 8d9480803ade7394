// A real etcd cluster on loopback for tests of musterd's replicas: Debian's
// `etcd` binary (etcd-server), N members with client and peer ports of their
// own and data in a temporary directory; every member killed with its
// process group when the object goes away. Not thread-safe.
#ifndef MUSTER_TESTS_TESTING_ETCD_H_
#define MUSTER_TESTS_TESTING_ETCD_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/subprocess.h"

namespace muster::testing {

class EtcdCluster {
 public:
  // The etcd binary: $MUSTER_ETCD, else /usr/bin/etcd; empty when neither
  // exists (tests then fail saying how to install it).
  static std::string Binary();

  // Starts `members` members (etcd's default timing: 100 ms heartbeat, 1 s
  // election) and waits up to `timeout` until each answers on its client
  // port; ok() says whether they did.
  explicit EtcdCluster(int members = 3,
                       absl::Duration timeout = absl::Seconds(30));
  // The same on `host` (an address of a network namespace the test made),
  // every member and etcdctl run under `exec_prefix` (e.g. {"ip", "netns",
  // "exec", NS}).
  EtcdCluster(int members, std::string host,
              std::vector<std::string> exec_prefix,
              absl::Duration timeout = absl::Seconds(30));
  ~EtcdCluster();

  bool ok() const { return ok_; }
  int size() const { return static_cast<int>(members_.size()); }
  // "http://127.0.0.1:P1,http://127.0.0.1:P2,..." for --etcd-endpoints.
  std::string Endpoints() const;
  std::string ClientUrl(int i) const;

  // SIGKILL member i (and reap it).
  void Kill(int i);
  // Hands etcd's own leadership to another member when member i holds it
  // (`etcdctl move-leader`), and waits until i is a follower: killing a
  // follower then costs the cluster no election. False when i still leads at
  // `timeout`.
  bool MoveLeaderAwayFrom(int i, absl::Duration timeout = absl::Seconds(10));
  // The member that is etcd's own leader now, as the members say (each
  // asked with `etcdctl endpoint status`); nullopt when none says so.
  std::optional<int> Leader() const;
  // Starts member i again with its data (after Kill); waits until its client
  // port answers.
  bool Restart(int i, absl::Duration timeout = absl::Seconds(30));
  Subprocess* proc(int i) { return members_[i].proc.get(); }
  // Members' logs, for a failing test's message.
  std::string Logs() const;

  // `etcdctl get --prefix KEY` (v3 API) against the cluster: the raw output.
  std::string Get(const std::string& prefix) const;

 private:
  // Member i's id (hex, as etcdctl prints it) and whether it leads; nullopt
  // when it does not answer.
  std::optional<std::pair<std::string, bool>> MemberStatus(int i) const;

  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    std::string data_dir;
    std::unique_ptr<Subprocess> proc;
  };
  void StartMember(Member& m, bool first_time);
  void Init(int members, absl::Duration timeout);
  std::vector<std::string> Wrapped(std::vector<std::string> argv) const;
  // Whether a quorum answers a linearizable read.
  bool Answers() const;

  std::string host_ = "127.0.0.1";
  std::vector<std::string> exec_prefix_;
  std::string dir_;
  std::string initial_cluster_;
  std::vector<Member> members_;
  bool ok_ = false;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_ETCD_H_
