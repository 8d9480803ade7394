// musterd replicas on a real 3-member etcd cluster on loopback (Debian's
// etcd-server), in process (issue 35):
//   - a Store namespace one leader dropped is refused by the next: the drop is
//     recorded in etcd (PREFIX/closed/<job>/<round>) and loaded by the new
//     leader, whose every operation on it answers ABORTED, over gRPC too;
//   - killing etcd's own leader member, again and again, deposes no replica
//     and moves no leadership (renewals time out while etcd elects, but etcd
//     extends every lease when it promotes a new leader), and a Store write
//     made meanwhile waits for etcd and is acknowledged;
//   - lease renewals go through the members that answer: with one member
//     frozen (SIGSTOP: its port accepts, nothing answers), each renewal still
//     answers within its timeout;
//   - the console's /api/v1/cluster shows each etcd member's health, and a
//     killed member as unhealthy.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/store.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "rendezvous/src/replica/etcd_client.h"
#include "tests/testing/etcd.h"
#include "tests/testing/http.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/wait.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::EtcdCluster;
using ::muster::testing::StartLoopbackServer;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPrefix[] = "/replica-etcd-test";

class ReplicaEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(EtcdCluster::Binary().empty())
        << "no etcd binary: apt-get install etcd-server "
           "(scripts/install-deps.sh)";
    etcd_ = std::make_unique<EtcdCluster>(3);
    ASSERT_TRUE(etcd_->ok()) << etcd_->Logs();
  }

  // A replica on loopback; a deposition is counted, not an exit.
  std::unique_ptr<RendezvousServer> Replica(std::string http_listen = "") {
    ServerOptions o;
    o.http_listen = std::move(http_listen);
    o.replica.etcd.endpoints = {etcd_->ClientUrl(0), etcd_->ClientUrl(1),
                                etcd_->ClientUrl(2)};
    o.replica.prefix = kPrefix;
    // Loaded jobs no agent claims keep their namespaces for the test's span.
    o.replica.forget_unclaimed_after = absl::Minutes(5);
    o.replica.on_deposed = [this](const absl::Status& why) {
      ++deposed_;
      last_deposition_ = std::string(why.message());
    };
    return StartLoopbackServer(std::move(o));
  }

  static bool Leads(RendezvousServer& s) {
    return s.ReplicaRole() == "leading";
  }

  // A Store write through the leader's committer, acknowledged.
  static absl::Status Commit(store::KvStore& store, const std::string& ns,
                             const std::string& key, const std::string& value) {
    absl::Notification done;
    absl::Status result;
    store.SetAsync(ns, key, value, [&](absl::Status s) {
      result = s;
      done.Notify();
    });
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(10))) {
      return absl::DeadlineExceededError("no acknowledgement in 10 s");
    }
    return result;
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::atomic<int> deposed_{0};
  std::string last_deposition_;
};

TEST_F(ReplicaEtcdTest, ANewLeaderRefusesANamespaceItsPredecessorDropped) {
  std::unique_ptr<RendezvousServer> first = Replica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return Leads(*first); }, absl::Seconds(30)));
  std::unique_ptr<RendezvousServer> second = Replica();
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return second->ReplicaRole() == "standby"; },
                        absl::Seconds(30)));

  ASSERT_TRUE(Commit(first->store(), "job/1", "k", "round 1").ok());
  ASSERT_TRUE(Commit(first->store(), "job/2", "k", "round 2").ok());
  first->store().DropNamespace("job/1");  // round 1 ended
  const std::string record = absl::StrCat(kPrefix, "/closed/job/1");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return absl::StrContains(etcd_->Get(absl::StrCat(kPrefix, "/closed/")),
                                 record);
      },
      absl::Seconds(10)))
      << etcd_->Get(kPrefix);
  // The keys went in the same transaction.
  EXPECT_THAT(etcd_->Get(absl::StrCat(kPrefix, "/store/job/1/")),
              Not(HasSubstr("round 1")));

  first->Shutdown();  // resigns: the standby leads at once
  ASSERT_TRUE(WaitUntil([&] { return Leads(*second); }, absl::Seconds(30)));
  store::KvStore& store = second->store();
  EXPECT_EQ(*store.Get("job/2", "k"), "round 2");
  // Every operation on the dropped round answers ABORTED on the new leader.
  EXPECT_TRUE(absl::IsAborted(store.Get("job/1", "k").status()));
  absl::Status set;
  store.SetAsync("job/1", "k", "late", [&](absl::Status s) { set = s; });
  EXPECT_TRUE(absl::IsAborted(set)) << set;
  absl::StatusOr<bool> deleted;
  store.DeleteAsync("job/1", "k", [&](absl::StatusOr<bool> v) { deleted = v; });
  EXPECT_TRUE(absl::IsAborted(deleted.status())) << deleted.status();
  absl::StatusOr<std::string> kept;
  store.CompareSetAsync("job/1", "k", "x", "y",
                        [&](absl::StatusOr<std::string> v) { kept = v; });
  EXPECT_TRUE(absl::IsAborted(kept.status())) << kept.status();
  // And over gRPC, as a worker of the ended round would call it.
  auto stub =
      v1::Store::NewStub(muster::testing::LoopbackChannel(second->port()));
  v1::SetRequest request;
  request.set_prefix("job/1");
  request.set_key("k");
  request.set_value("late");
  grpc::Status over_grpc =
      muster::testing::CallUnary(*stub, &v1::Store::Stub::Set, request);
  EXPECT_EQ(over_grpc.error_code(), grpc::StatusCode::ABORTED)
      << over_grpc.error_message();
  EXPECT_THAT(over_grpc.error_message(), HasSubstr("job/1"));

  // Forgetting the job forgets its records too: run again, it starts afresh.
  store.DropNamespacesWithPrefix("job/");
  EXPECT_TRUE(WaitUntil(
      [&] {
        return !absl::StrContains(etcd_->Get(absl::StrCat(kPrefix, "/closed/")),
                                  record);
      },
      absl::Seconds(10)))
      << etcd_->Get(kPrefix);
  EXPECT_TRUE(Commit(store, "job/1", "k", "a new run").ok());
  EXPECT_EQ(deposed_.load(), 0) << last_deposition_;
}

TEST_F(ReplicaEtcdTest, KillingEtcdsLeaderDeposesNoReplica) {
  std::unique_ptr<RendezvousServer> first = Replica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return Leads(*first); }, absl::Seconds(30)));
  std::unique_ptr<RendezvousServer> second = Replica();
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return second->ReplicaRole() == "standby"; },
                        absl::Seconds(30)));
  for (int run = 0; run < 3; ++run) {
    std::optional<int> leader;
    ASSERT_TRUE(
        WaitUntil([&] { return (leader = etcd_->Leader()).has_value(); },
                  absl::Seconds(20)))
        << etcd_->Logs();
    etcd_->Kill(*leader);
    // A Store write made while etcd elects waits for it, and is acknowledged.
    absl::Notification written;
    absl::Status during = absl::UnknownError("no answer");
    first->store().SetAsync("job/1", "during", absl::StrCat(run),
                            [&](absl::Status s) {
                              during = s;
                              written.Notify();
                            });
    // Another member leads: etcd's own failover.
    ASSERT_TRUE(WaitUntil(
        [&] {
          std::optional<int> now = etcd_->Leader();
          return now.has_value() && *now != *leader;
        },
        absl::Seconds(20)))
        << etcd_->Logs();
    ASSERT_TRUE(written.WaitForNotificationWithTimeout(absl::Seconds(15)));
    EXPECT_TRUE(during.ok()) << "run " << run << ": " << during;
    // The leader confirms itself again (a committed write needs it).
    EXPECT_TRUE(Commit(first->store(), "job/1", "run", absl::StrCat(run)).ok())
        << "run " << run;
    ASSERT_TRUE(etcd_->Restart(*leader)) << etcd_->Logs();
  }
  EXPECT_EQ(deposed_.load(), 0) << last_deposition_;
  EXPECT_TRUE(Leads(*first));
  EXPECT_EQ(second->ReplicaRole(), "standby");
}

TEST_F(ReplicaEtcdTest, RenewalsGoThroughTheMembersThatAnswer) {
  // Member 0, tried first, freezes; it must not be etcd's leader (the
  // cluster would need an election, another test's matter).
  ASSERT_TRUE(etcd_->MoveLeaderAwayFrom(0)) << etcd_->Logs();
  EtcdConnection connection;
  connection.endpoints = {etcd_->ClientUrl(0), etcd_->ClientUrl(1),
                          etcd_->ClientUrl(2)};
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create(connection);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<int64_t> lease =
      (*client)->LeaseGrant(5, absl::Seconds(5), nullptr);
  ASSERT_TRUE(lease.ok()) << lease.status();
  etcd_->proc(0)->Signal(SIGSTOP);
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<int64_t> ttl =
        (*client)->LeaseKeepAlive(*lease, absl::Milliseconds(400));
    EXPECT_TRUE(ttl.ok()) << "renewal " << i << ": " << ttl.status();
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(600)) << "renewal " << i;
  }
  etcd_->proc(0)->Signal(SIGCONT);
}

// The cluster page's etcd: every member healthy, one of them etcd's leader;
// a killed member is named unhealthy within a few seconds (the answer is
// refreshed every 2 s), the others stay healthy.
TEST_F(ReplicaEtcdTest, TheConsoleShowsEachEtcdMembersHealth) {
  auto replica = Replica("127.0.0.1:0");
  ASSERT_NE(replica, nullptr);
  auto etcd = [&]() -> nlohmann::json {
    const std::string r =
        testing::HttpGet(replica->http_port(), "/api/v1/cluster");
    if (testing::HttpStatusCode(r) != 200) return nullptr;
    return nlohmann::json::parse(testing::HttpBody(r), nullptr, false)["etcd"];
  };
  nlohmann::json members;
  ASSERT_TRUE(WaitUntil(
      [&] {
        members = etcd();
        if (!members.is_array() || members.size() != 3) return false;
        for (const auto& m : members) {
          if (!m.value("healthy", false)) return false;
        }
        return true;
      },
      absl::Seconds(20)))
      << members.dump(2);
  int leaders = 0;
  for (const auto& m : members) {
    leaders += m.value("leader", false) ? 1 : 0;
    EXPECT_THAT(m.value("version", ""), ::testing::StartsWith("3."));
    EXPECT_GT(m.value("db_size_bytes", 0), 0);
  }
  EXPECT_EQ(leaders, 1) << members.dump(2);

  etcd_->Kill(2);
  ASSERT_TRUE(WaitUntil(
      [&] {
        members = etcd();
        return members.is_array() && members.size() == 3 &&
               !members[2].value("healthy", true) &&
               members[0].value("healthy", false) &&
               members[1].value("healthy", false);
      },
      absl::Seconds(20)))
      << members.dump(2);
  EXPECT_EQ(members[2].value("endpoint", ""), etcd_->ClientUrl(2));
  EXPECT_FALSE(members[2].value("error", "").empty()) << members.dump(2);
}

}  // namespace
}  // namespace muster::rendezvous
