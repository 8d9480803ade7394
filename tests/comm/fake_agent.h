// FakeAgent: the agent's part of in-place recovery, for tests that need no
// agent: a Store server on loopback (one namespace per round: "round<N>"),
// one control directory per worker, and the `round` files it writes.
#ifndef MUSTER_TESTS_COMM_FAKE_AGENT_H_
#define MUSTER_TESTS_COMM_FAKE_AGENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "muster/comm/communicator.h"
#include "muster/rendezvous/server.h"
#include "muster/store/store.h"

namespace muster::comm_testing {

class FakeAgent {
 public:
  FakeAgent();

  // Whether the server started (else a test failure was added).
  bool ok() const { return server_ != nullptr; }
  // HOST:PORT of the Store server.
  std::string endpoint() const;

  // Worker `w`'s control directory (created on first use).
  std::string Dir(int w);

  // A client of the store namespace `prefix`.
  std::shared_ptr<store::Store> Store(const std::string& prefix);

  // Writes worker w's `round` (seq counted per worker): running round
  // `round` as rank/world on the namespace "round<round>" (local world =
  // world), or (running = false) that it is changing, with `reason`. The
  // store token is "s3cret-token" (tests check it never shows).
  void Write(int w, bool running, int64_t round, int rank, int world,
             const std::string& reason = "");

  // Options of a thread rank playing worker w: its control directory and
  // host, loopback.
  comm::CommOptions Options(int w, const std::string& host);

 private:
  std::unique_ptr<rendezvous::RendezvousServer> server_;
  std::string root_;
  std::map<int, int64_t> seq_;
};

}  // namespace muster::comm_testing

#endif  // MUSTER_TESTS_COMM_FAKE_AGENT_H_
