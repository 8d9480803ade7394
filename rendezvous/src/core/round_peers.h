// Which members a RoundReady lists. A round of n nodes sent to every member
// with every peer is n² peer entries: 10,000 nodes would be 10^8 entries
// (~6 GB on the wire) for one round. Each agent needs only the peers its
// preflight probes (agent/src/preflight.h): the master, its ring neighbours and
// a sample; so above kFullPeerListMax nodes a RoundReady carries just those
// (and the agent itself), with RoundReady.peers_partial set. The full list is
// in GetStatus (`muster status`).
#ifndef MUSTER_RENDEZVOUS_SRC_ROUND_PEERS_H_
#define MUSTER_RENDEZVOUS_SRC_ROUND_PEERS_H_

#include <cstdint>
#include <vector>

namespace muster::rendezvous {

// Rounds up to this many nodes list every member in each RoundReady.
inline constexpr int kFullPeerListMax = 64;
// Peers besides the master and the ring neighbours in a partial list: the
// agent's default preflight sample.
inline constexpr int kPeerSample = 8;

// The group ranks, ascending, that the RoundReady of group rank `me` lists in
// a round of `n` nodes: all of them when n <= kFullPeerListMax; otherwise me,
// 0, me-1 and me+1 (on the ring) and kPeerSample others drawn from a generator
// seeded with (seed, me), so each member's sample differs and the choice is
// repeatable (a reconnecting member gets the same list). O(1) above the limit.
std::vector<int> RoundReadyPeerRanks(int n, int me, uint64_t seed);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_ROUND_PEERS_H_
