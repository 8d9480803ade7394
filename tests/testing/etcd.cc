#include "tests/testing/etcd.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/testing/wait.h"

namespace muster::testing {

std::string EtcdCluster::Binary() {
  if (const char* env = std::getenv("MUSTER_ETCD"); env != nullptr && *env)
    return env;
  if (access("/usr/bin/etcd", X_OK) == 0) return "/usr/bin/etcd";
  return "";
}

EtcdCluster::EtcdCluster(int members, absl::Duration timeout) {
  Init(members, timeout);
}

EtcdCluster::EtcdCluster(int members, std::string host,
                         std::vector<std::string> exec_prefix,
                         absl::Duration timeout)
    : host_(std::move(host)), exec_prefix_(std::move(exec_prefix)) {
  Init(members, timeout);
}

std::vector<std::string> EtcdCluster::Wrapped(
    std::vector<std::string> argv) const {
  std::vector<std::string> out = exec_prefix_;
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

bool EtcdCluster::Answers() const {
  Subprocess get(Wrapped({"/usr/bin/etcdctl", "--endpoints", Endpoints(),
                          "--command-timeout=2s", "get", "ready-check"}),
                 {{"ETCDCTL_API", "3"}});
  return get.WaitOrKill(absl::Seconds(5)) == 0;
}

void EtcdCluster::Init(int members, absl::Duration timeout) {
  dir_ = MakeTempDir("etcd");
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = absl::StrCat("e", i);
    m.client_port = FreePort();
    m.peer_port = FreePort();
    m.data_dir = absl::StrCat(dir_, "/", m.name);
    peers.push_back(absl::StrCat(m.name, "=http://", host_, ":", m.peer_port));
    members_.push_back(std::move(m));
  }
  initial_cluster_ = absl::StrJoin(peers, ",");
  if (Binary().empty()) return;
  for (Member& m : members_) StartMember(m, /*first_time=*/true);
  // A quorum answers a linearizable read: the cluster has its leader.
  ok_ = WaitUntil([&] { return Answers(); }, timeout, absl::Milliseconds(200));
}

EtcdCluster::~EtcdCluster() {
  for (Member& m : members_) {
    if (m.proc != nullptr) m.proc->Kill();
  }
  // Each member preallocates its WAL (about 120 MB a member): left behind,
  // a few dozen test runs fill /tmp.
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

void EtcdCluster::StartMember(Member& m, bool first_time) {
  const std::string client = absl::StrCat("http://", host_, ":", m.client_port);
  const std::string peer = absl::StrCat("http://", host_, ":", m.peer_port);
  m.proc =
      std::make_unique<Subprocess>(Wrapped({Binary(),
                                            "--name",
                                            m.name,
                                            "--data-dir",
                                            m.data_dir,
                                            "--listen-client-urls",
                                            client,
                                            "--advertise-client-urls",
                                            client,
                                            "--listen-peer-urls",
                                            peer,
                                            "--initial-advertise-peer-urls",
                                            peer,
                                            "--initial-cluster",
                                            initial_cluster_,
                                            "--initial-cluster-state",
                                            first_time ? "new" : "existing",
                                            "--initial-cluster-token",
                                            "muster-test",
                                            "--log-level",
                                            "warn"}));
}

std::string EtcdCluster::Endpoints() const {
  std::vector<std::string> urls;
  for (int i = 0; i < size(); ++i) urls.push_back(ClientUrl(i));
  return absl::StrJoin(urls, ",");
}

std::string EtcdCluster::ClientUrl(int i) const {
  return absl::StrCat("http://", host_, ":", members_[i].client_port);
}

void EtcdCluster::Kill(int i) {
  if (members_[i].proc != nullptr) members_[i].proc->Kill();
}

std::optional<std::pair<std::string, bool>> EtcdCluster::MemberStatus(
    int i) const {
  Subprocess status(
      Wrapped({"/usr/bin/etcdctl", "--endpoints", ClientUrl(i),
               "--command-timeout=2s", "endpoint", "status", "-w", "simple"}),
      {{"ETCDCTL_API", "3"}});
  if (status.WaitOrKill(absl::Seconds(5)) != 0) return std::nullopt;
  // "URL, ID, VERSION, DB SIZE, IS LEADER, IS LEARNER, ..." (other lines are
  // etcdctl's warnings).
  for (absl::string_view line : absl::StrSplit(status.Output(), '\n')) {
    if (!absl::StartsWith(line, "http")) continue;
    std::vector<std::string> fields = absl::StrSplit(line, ", ");
    if (fields.size() < 5) return std::nullopt;
    return std::make_pair(fields[1],
                          absl::StripAsciiWhitespace(fields[4]) == "true");
  }
  return std::nullopt;
}

std::optional<int> EtcdCluster::Leader() const {
  for (int i = 0; i < size(); ++i) {
    if (members_[i].proc == nullptr || !members_[i].proc->Running()) continue;
    std::optional<std::pair<std::string, bool>> status = MemberStatus(i);
    if (status.has_value() && status->second) return i;
  }
  return std::nullopt;
}

bool EtcdCluster::MoveLeaderAwayFrom(int i, absl::Duration timeout) {
  return WaitUntil(
      [&] {
        std::optional<std::pair<std::string, bool>> self = MemberStatus(i);
        if (!self.has_value()) return false;
        if (!self->second) return true;  // a follower already
        std::optional<std::pair<std::string, bool>> next =
            MemberStatus((i + 1) % size());
        if (!next.has_value()) return false;
        Subprocess move(
            Wrapped({"/usr/bin/etcdctl", "--endpoints", ClientUrl(i),
                     "--command-timeout=2s", "move-leader", next->first}),
            {{"ETCDCTL_API", "3"}});
        move.WaitOrKill(absl::Seconds(5));
        return false;  // asked again on the next poll
      },
      timeout, absl::Milliseconds(200));
}

bool EtcdCluster::Restart(int i, absl::Duration timeout) {
  Member& m = members_[i];
  StartMember(m, /*first_time=*/false);
  return WaitUntil([&] { return Answers(); }, timeout, absl::Milliseconds(200));
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
  Subprocess get(Wrapped({"/usr/bin/etcdctl", "--endpoints", Endpoints(), "get",
                          "--prefix", prefix}),
                 {{"ETCDCTL_API", "3"}});
  get.WaitOrKill(absl::Seconds(10));
  return get.Output();
}

}  // namespace muster::testing
