// ChoosePreflightPeers on the two shapes of RoundReady: every member listed
// (rounds up to 64 nodes), and musterd's partial list of a large round
// (peers_partial), where the ring comes from group_world_size and the sample
// from the peers listed.
#include <algorithm>
#include <string>
#include <vector>

#include "agent/src/preflight.h"
#include "gtest/gtest.h"

namespace muster::agent {
namespace {

v1::Peer MakePeer(int rank) {
  v1::Peer p;
  p.set_node_id("n" + std::to_string(rank));
  p.set_advertised_addr("10.0.0.1");
  p.set_group_rank(rank);
  p.set_reserved_port(20000 + rank);
  return p;
}

std::vector<int> Ranks(const std::vector<v1::Peer>& peers) {
  std::vector<int> out;
  for (const v1::Peer& p : peers) out.push_back(p.group_rank());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PreflightPeersTest, FullListOfASmallRound) {
  v1::RoundReady r;
  r.set_group_rank(2);
  r.set_group_world_size(5);
  for (int i = 0; i < 5; ++i) *r.add_peers() = MakePeer(i);
  EXPECT_EQ(Ranks(ChoosePreflightPeers(r)), (std::vector<int>{0, 1, 3, 4}));
}

TEST(PreflightPeersTest, PartialListOfALargeRoundUsesTheWholeRing) {
  v1::RoundReady r;
  r.set_group_rank(0);
  r.set_group_world_size(10'000);
  r.set_peers_partial(true);
  // What musterd lists for rank 0: itself, its ring neighbours (9999 and 1)
  // and a sample.
  for (int i : {0, 1, 17, 230, 999, 4000, 5123, 7001, 8002, 9000, 9999})
    *r.add_peers() = MakePeer(i);
  const std::vector<int> chosen = Ranks(ChoosePreflightPeers(r, /*sample=*/8));
  // Both neighbours on the ring of 10,000 (not of the 11 listed), and the
  // sample from the listed peers: all 10 others.
  EXPECT_EQ(chosen, (std::vector<int>{1, 17, 230, 999, 4000, 5123, 7001, 8002,
                                      9000, 9999}));
}

}  // namespace
}  // namespace muster::agent
