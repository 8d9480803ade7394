#include "rendezvous/src/core/round_peers.h"

#include <algorithm>
#include <random>

namespace muster::rendezvous {

std::vector<int> RoundReadyPeerRanks(int n, int me, uint64_t seed) {
  std::vector<int> out;
  if (n <= kFullPeerListMax) {
    out.reserve(n);
    for (int r = 0; r < n; ++r) out.push_back(r);
    return out;
  }
  auto add = [&out](int r) {
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  };
  add(me);
  add(0);
  add((me + n - 1) % n);
  add((me + 1) % n);
  const size_t want = out.size() + kPeerSample;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(me));
  std::uniform_int_distribution<int> pick(0, n - 1);
  // n > kFullPeerListMax >> kPeerSample + 4: rejections are rare.
  while (out.size() < want) add(pick(rng));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace muster::rendezvous
