// The Coordinator's side of the preflight: a PreflightFailed report fails the
// job at once for every agent, naming both nodes, the port and the cause; a
// stale one is ignored. RoundReady carries each peer's reserved port for the
// probes.
#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "tests/testing/fake_channel.h"
#include "tests/testing/join.h"

namespace muster::rendezvous {
namespace {

using ::testing::HasSubstr;

// What the Coordinator sent each agent.
using RecordingChannel = ::muster::testing::FakeChannel;

v1::Join MakeJoin(const std::string& node, const std::string& addr, int port) {
  return muster::testing::MakeJoin({.job_id = "pf",
                                    .node_id = node,
                                    .hostname = "host-" + node,
                                    .advertised_addr = addr,
                                    .min_nodes = 2,
                                    .max_nodes = 2,
                                    .master_port = port});
}

std::optional<v1::RoundReady> LastReady(RecordingChannel& c) {
  std::optional<v1::RoundReady> ready;
  for (const auto& m : c.messages()) {
    if (m.has_round_ready()) ready = m.round_ready();
  }
  return ready;
}

TEST(CoordinatorPreflightTest, ABlockedPairFailsTheJobForEveryAgent) {
  FakeClock clock;
  Coordinator coordinator({}, &clock);
  auto a = std::make_shared<RecordingChannel>();
  auto b = std::make_shared<RecordingChannel>();
  ASSERT_TRUE(coordinator.OnJoin(1, MakeJoin("a", "10.0.0.1", 5001), a).ok());
  ASSERT_TRUE(coordinator.OnJoin(2, MakeJoin("b", "10.0.0.2", 5002), b).ok());
  ASSERT_TRUE(LastReady(*b).has_value());
  const v1::RoundReady ready = *LastReady(*b);
  ASSERT_EQ(ready.peers_size(), 2);
  EXPECT_EQ(ready.peers(0).reserved_port(), 5001);
  EXPECT_EQ(ready.peers(1).reserved_port(), 5002);

  v1::PreflightFailed stale;
  stale.set_round(ready.round() + 7);
  coordinator.OnPreflightFailed(2, stale);
  EXPECT_FALSE(a->messages().back().has_job_failed());

  v1::PreflightFailed failed;
  failed.set_round(ready.round());
  failed.set_peer_node_id("a");
  failed.set_peer_hostname("host-a");
  failed.set_peer_address("10.0.0.1");
  failed.set_port(5001);
  failed.set_outcome("filtered");
  failed.set_explanation("a firewall drops TCP port 5001.");
  coordinator.OnPreflightFailed(2, failed);
  for (auto* c : {a.get(), b.get()}) {
    ASSERT_TRUE(c->messages().back().has_job_failed());
    const std::string cause = c->messages().back().job_failed().root_cause();
    EXPECT_THAT(cause, HasSubstr("(10.0.0.2) cannot reach"));
    EXPECT_THAT(cause, HasSubstr("(10.0.0.1) on TCP port 5001: filtered"));
    EXPECT_THAT(cause, HasSubstr("firewall"));
  }
}

}  // namespace
}  // namespace muster::rendezvous
