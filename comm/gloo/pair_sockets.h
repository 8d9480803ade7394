// The TCP sockets that carry a Gloo context's pairs, found from outside Gloo.
//
// libmuster_comm must reach those sockets to abort a context: a peer died, and
// every rank blocked in a collective must fail now, not at the timeout. Gloo
// keeps them in tcp::Pair, whose header Debian's libgloo-dev cannot compile: it
// includes gloo/common/memory.h, which the package does not ship. So the
// sockets are found the way `ss -p` finds them: by walking this process's
// descriptors and matching addresses. Every pair socket is either the one that
// connected to the peer's listening address for this pair (its peer name says
// so) or the one accepted on this rank's own listening address for the pair
// (its socket name says so); connectFullMesh published both addresses in the
// Store.
#ifndef MUSTER_COMM_GLOO_PAIR_SOCKETS_H_
#define MUSTER_COMM_GLOO_PAIR_SOCKETS_H_

#include <sys/socket.h>

#include <vector>

namespace muster::comm::internal {

class PairSockets {
 public:
  PairSockets() = default;

  // Scans /proc/self/fd. `own[r]` is this rank's listening address for its
  // pair with rank r, `theirs[r]` is rank r's listening address for its pair
  // with this rank; both have one entry per rank, and entries with
  // ss_family == AF_UNSPEC (this rank, or unknown) match nothing. Call it
  // after connectFullMesh returned, when every pair has its final socket.
  static PairSockets Find(std::vector<sockaddr_storage> own,
                          std::vector<sockaddr_storage> theirs);

  // Ranks whose pair socket was found; the others cannot be aborted or tuned.
  std::vector<int> FoundPeers() const;

  // shutdown(SHUT_RDWR) on every pair socket. Gloo's event loop then reads
  // EOF, fails every pending operation of the pair with an IoException and
  // closes it; the peer reads EOF too. Returns how many were shut down.
  int ShutdownAll() const;

 private:
  struct Found {
    int fd;
    int peer;
  };

  // Whether `fd` still is the pair socket for `peer`: a descriptor that Gloo
  // closed may have been reused by then, and must be left alone.
  bool StillPair(const Found& found) const;

  std::vector<sockaddr_storage> own_;
  std::vector<sockaddr_storage> theirs_;
  std::vector<Found> found_;
};

// Whether two socket addresses are the same IPv4 or IPv6 address and port.
bool SameEndpoint(const sockaddr_storage& a, const sockaddr_storage& b);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_PAIR_SOCKETS_H_
