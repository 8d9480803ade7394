#include "agent/src/preflight.h"

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "muster/common/probe.h"

namespace muster::agent {

std::vector<v1::Peer> ChoosePreflightPeers(const v1::RoundReady& ready,
                                           int sample) {
  // A large round's RoundReady lists only some peers (peers_partial): the ring
  // is the whole group's, and the sample is drawn from the peers listed.
  const int n = ready.group_world_size() > 0 ? ready.group_world_size()
                                             : ready.peers_size();
  const int me = ready.group_rank();
  std::set<int> chosen;
  auto add = [&](int rank) {
    if (n > 1 && rank != me) chosen.insert(((rank % n) + n) % n);
  };
  add(0);
  add(me - 1);
  add(me + 1);
  std::vector<int> others;
  for (const v1::Peer& p : ready.peers()) {
    const int r = p.group_rank();
    if (r != me && !chosen.contains(r)) others.push_back(r);
  }
  std::mt19937 rng(std::random_device{}());
  std::shuffle(others.begin(), others.end(), rng);
  for (int i = 0; i < sample && i < static_cast<int>(others.size()); ++i)
    chosen.insert(others[i]);

  std::vector<v1::Peer> out;
  for (const v1::Peer& p : ready.peers()) {
    if (chosen.contains(p.group_rank()) && p.reserved_port() > 0)
      out.push_back(p);
  }
  return out;
}

std::optional<v1::PreflightFailed> RunPreflight(
    const v1::RoundReady& ready, const std::vector<v1::Peer>& peers,
    absl::Duration timeout) {
  std::vector<ProbeResult> results(peers.size());
  std::vector<std::thread> threads;
  threads.reserve(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    threads.emplace_back([&, i] {
      results[i] = ProbeTcp(peers[i].advertised_addr(),
                            peers[i].reserved_port(), timeout);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < peers.size(); ++i) {
    const ProbeResult& r = results[i];
    if (r.outcome == ProbeOutcome::kOpen || r.outcome == ProbeOutcome::kRefused)
      continue;
    v1::PreflightFailed failed;
    failed.set_round(ready.round());
    failed.set_peer_node_id(peers[i].node_id());
    failed.set_peer_hostname(peers[i].hostname());
    failed.set_peer_address(peers[i].advertised_addr());
    failed.set_port(peers[i].reserved_port());
    failed.set_outcome(std::string(ProbeOutcomeName(r.outcome)));
    failed.set_explanation(r.Explain() + " " + r.Fix());
    return failed;
  }
  return std::nullopt;
}

}  // namespace muster::agent
