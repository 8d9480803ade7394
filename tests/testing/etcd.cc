#include "tests/testing/etcd.h"

#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/net.h"
#include "tests/testing/wait.h"

namespace muster::testing {

std::string EtcdCluster::Binary() {
  if (const char* env = std::getenv("MUSTER_ETCD"); env != nullptr && *env)
    return env;
  if (access("/usr/bin/etcd", X_OK) == 0) return "/usr/bin/etcd";
  return "";
}

EtcdCluster::EtcdCluster(int members, absl::Duration timeout) {
  dir_ = MakeTempDir("etcd");
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = absl::StrCat("e", i);
    m.client_port = FreePort();
    m.peer_port = FreePort();
    m.data_dir = absl::StrCat(dir_, "/", m.name);
    peers.push_back(
        absl::StrCat(m.name, "=http://127.0.0.1:", m.peer_port));
    members_.push_back(std::move(m));
  }
  initial_cluster_ = absl::StrJoin(peers, ",");
  if (Binary().empty()) return;
  for (Member& m : members_) StartMember(m, /*first_time=*/true);
  ok_ = WaitUntil(
      [&] {
        for (const Member& m : members_) {
          if (!CanConnect("127.0.0.1", m.client_port, absl::Milliseconds(200)))
            return false;
        }
        return true;
      },
      timeout);
  // A quorum answers a linearizable read: the cluster has its leader.
  ok_ = ok_ && WaitUntil(
                   [&] {
                     Subprocess get({"/usr/bin/etcdctl", "--endpoints",
                                     Endpoints(), "get", "ready-check"},
                                    {{"ETCDCTL_API", "3"}});
                     return get.WaitOrKill(absl::Seconds(5)) == 0;
                   },
                   timeout);
}

EtcdCluster::~EtcdCluster() {
  for (Member& m : members_) {
    if (m.proc != nullptr) m.proc->Kill();
  }
}

void EtcdCluster::StartMember(Member& m, bool first_time) {
  const std::string client = absl::StrCat("http://127.0.0.1:", m.client_port);
  const std::string peer = absl::StrCat("http://127.0.0.1:", m.peer_port);
  m.proc = std::make_unique<Subprocess>(std::vector<std::string>{
      Binary(), "--name", m.name, "--data-dir", m.data_dir,
      "--listen-client-urls", client, "--advertise-client-urls", client,
      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
      "--initial-cluster", initial_cluster_, "--initial-cluster-state",
      first_time ? "new" : "existing", "--initial-cluster-token",
      "muster-test", "--log-level", "warn"});
}

std::string EtcdCluster::Endpoints() const {
  std::vector<std::string> urls;
  for (int i = 0; i < size(); ++i) urls.push_back(ClientUrl(i));
  return absl::StrJoin(urls, ",");
}

std::string EtcdCluster::ClientUrl(int i) const {
  return absl::StrCat("http://127.0.0.1:", members_[i].client_port);
}

void EtcdCluster::Kill(int i) {
  if (members_[i].proc != nullptr) members_[i].proc->Kill();
}

bool EtcdCluster::Restart(int i, absl::Duration timeout) {
  Member& m = members_[i];
  StartMember(m, /*first_time=*/false);
  return WaitUntil(
      [&] {
        return CanConnect("127.0.0.1", m.client_port, absl::Milliseconds(200));
      },
      timeout);
}

std::string EtcdCluster::Logs() const {
  std::string out;
  for (const Member& m : members_) {
    if (m.proc == nullptr) continue;
    absl::StrAppend(&out, "--- etcd ", m.name, " ---\n", m.proc->Output());
  }
  return out;
}

std::string EtcdCluster::Get(const std::string& prefix) const {
  Subprocess get({"/usr/bin/etcdctl", "--endpoints", Endpoints(), "get",
                  "--prefix", prefix},
                 {{"ETCDCTL_API", "3"}});
  get.WaitOrKill(absl::Seconds(10));
  return get.Output();
}

}  // namespace muster::testing
