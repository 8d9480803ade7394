// libmuster_comm: collectives between the ranks of a muster job, for C++
// workers.
//
//   auto comm = muster::comm::Communicator::FromEnvironment();  // under muster
//   if (!comm.ok()) { std::cerr << comm.status() << "\n"; return 1; }
//   std::vector<float> grad = ...;
//   absl::Status s = (*comm)->AllReduce(absl::MakeSpan(grad),
//                                       muster::comm::ReduceOp::kSum);
//
// This first backend is Gloo over TCP, on host memory. Ranks find each other
// through the round's key-value store (musterd's Store service, or an
// InMemoryStore when the ranks are threads of one process, as in tests).
//
// Errors are absl::Status; no exception leaves this API. Codes carry retry
// meaning:
//   INVALID_ARGUMENT     a bad argument (null buffer, root or rank out of
//                        range, unknown dtype or op).
//   FAILED_PRECONDITION  not run under muster (a launcher variable is
//                        missing), a bad interface or address, or the
//                        communicator was shut down.
//   DEADLINE_EXCEEDED    a peer did not join, or a collective did not
//                        finish, within the timeout.
//   ABORTED              a peer was lost in a collective (its connection
//                        closed or reset), or the round's store namespace
//                        was dropped; rejoin the next round.
//   UNAVAILABLE          a peer or the store could not be reached.
// After any error from a collective other than INVALID_ARGUMENT the
// communicator is broken (Gloo's pairs do not recover): later collectives
// return ABORTED with the first error's message.
//
// Signals: the first Create sets SIGPIPE to ignored if it still has its
// default action (ending the process), as Python does at start-up: otherwise
// a peer that dies mid-collective would kill this process silently instead of
// failing the collective with ABORTED. A handler the program installed is
// kept.
//
// Thread-safety: a Communicator is NOT safe for concurrent collectives. Every
// rank must issue the same collectives, with the same counts, dtypes, ops and
// roots, in the same order; issue them from one thread at a time (calls from
// several threads are serialized by a lock, but their order then differs
// between ranks and the job deadlocks or fails). rank() and world_size() may
// be called from any thread at any time.
#ifndef MUSTER_COMM_COMMUNICATOR_H_
#define MUSTER_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "muster/comm/types.h"

namespace muster::rendezvous {
class Store;
}  // namespace muster::rendezvous

namespace muster::comm {

struct CommOptions {
  // How long initialization waits for every peer, and how long each collective
  // may take end to end. The environment variable MUSTER_COMM_TIMEOUT (seconds,
  // may be fractional) overrides it.
  absl::Duration timeout = absl::Minutes(30);

  // The network interface Gloo binds and advertises (for example "eth0").
  // Empty: the variable MUSTER_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME, else see
  // `hostname`.
  std::string ifname;

  // The address or name Gloo binds and advertises, when no interface is named.
  // Empty: 127.0.0.1 when every rank runs on this machine (LOCAL_WORLD_SIZE ==
  // WORLD_SIZE, or ranks that share an in-process store), else the first
  // non-loopback IPv4 address of this machine (never the 127.0.1.1 that Debian
  // maps the host name to).
  std::string hostname;
};

// One rank's endpoint of a communicator. See the file comment for errors and
// thread-safety.
class Communicator {
 public:
  // Joins the job this process was launched into, from the launcher's
  // environment: RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MUSTER_STORE_ENDPOINT and
  // MUSTER_STORE_PREFIX. Blocks until every rank is connected, or
  // options.timeout passes. Thread-safe. Errors: FAILED_PRECONDITION naming the
  // first missing variable (run the program under muster); INVALID_ARGUMENT
  // naming a variable that is not a valid number or a bad MUSTER_COMM_TIMEOUT;
  // UNAVAILABLE when the store cannot be reached; and the errors of Create.
  static absl::StatusOr<std::unique_ptr<Communicator>> FromEnvironment(
      CommOptions options = {});

  // Joins a communicator of `world_size` ranks as `rank`, bootstrapping through
  // `store` (which every rank must see the same namespace of). Blocks until
  // every rank is connected to every other, or options.timeout passes. Ranks
  // may call Create several times on one store: the n-th call of each rank
  // joins the n-th communicator (a per-rank counter in the store keeps them
  // apart). Thread-safe (ranks may be threads of one process, each calling
  // Create). Errors: INVALID_ARGUMENT (null store, world_size < 1, rank outside
  // [0, world_size), timeout not positive, bad MUSTER_COMM_TIMEOUT);
  // FAILED_PRECONDITION when the interface or address to bind does not exist or
  // does not resolve; DEADLINE_EXCEEDED naming the ranks that did not join in
  // time; UNAVAILABLE or ABORTED when a peer or the store cannot be reached or
  // is lost while connecting.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      std::shared_ptr<rendezvous::Store> store, int rank, int world_size,
      CommOptions options = {});

  // Closes the connections (Shutdown).
  virtual ~Communicator() = default;

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This process's rank in [0, world_size()), and the number of ranks. Never
  // block.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Reduces `count` elements of `data` element-wise over all ranks with `op`,
  // in place: afterwards every rank holds the same result, bit for bit.
  // Floating-point sums are rounded in an order that does not depend on the
  // rank (but may differ from a sequential sum). Integer overflow wraps. count
  // == 0 returns OK at once without communicating. Blocks until every rank has
  // taken part, or the timeout passes. Errors: INVALID_ARGUMENT (null data with
  // count > 0, unknown dtype or op); those of the file comment.
  virtual absl::Status AllReduce(void* data, size_t count, DataType dtype,
                                 ReduceOp op) = 0;

  // The same, typed: T is float, double, int32_t or int64_t.
  template <typename T>
  absl::Status AllReduce(absl::Span<T> data, ReduceOp op) {
    return AllReduce(static_cast<void*>(data.data()), data.size(),
                     DataTypeOf<T>(), op);
  }

  // Copies `count` elements of `data` on rank `root` into `data` on every other
  // rank. Blocks until the data has arrived (the root: until it has been sent),
  // or the timeout passes. Errors: INVALID_ARGUMENT (root outside [0,
  // world_size), null data with count > 0, unknown dtype); those of the file
  // comment.
  virtual absl::Status Broadcast(void* data, size_t count, DataType dtype,
                                 int root) = 0;

  // The same, typed.
  template <typename T>
  absl::Status Broadcast(absl::Span<T> data, int root) {
    return Broadcast(static_cast<void*>(data.data()), data.size(),
                     DataTypeOf<T>(), root);
  }

  // Gathers `count` elements of `input` from every rank into `output` on every
  // rank, which holds world_size() * count elements: rank r's input lands at
  // output + r * count. `input` may be exactly that slot of `output` (in
  // place); any other overlap is INVALID_ARGUMENT. Blocks until every rank's
  // data has arrived, or the timeout passes. Errors: INVALID_ARGUMENT (null
  // input or output with count > 0, overlap, unknown dtype); those of the file
  // comment.
  virtual absl::Status AllGather(const void* input, void* output, size_t count,
                                 DataType dtype) = 0;

  // The same, typed; INVALID_ARGUMENT unless output.size() is
  // world_size() * input.size().
  template <typename T>
  absl::Status AllGather(absl::Span<const T> input, absl::Span<T> output) {
    if (output.size() != input.size() * static_cast<size_t>(world_size())) {
      return absl::InvalidArgumentError(
          "AllGather: output must hold world_size() * input.size() elements");
    }
    return AllGather(input.data(), output.data(), input.size(),
                     DataTypeOf<T>());
  }

  // Returns once every rank has called Barrier, or when the timeout passes.
  // Errors: those of the file comment.
  virtual absl::Status Barrier() = 0;

  // Closes the connections to every peer; peers still in a collective with this
  // rank get ABORTED. Later collectives return FAILED_PRECONDITION. Idempotent.
  // Not to be called while a collective of this communicator is in progress on
  // another thread.
  virtual void Shutdown() = 0;

 protected:
  Communicator() = default;
};

}  // namespace muster::comm

#endif  // MUSTER_COMM_COMMUNICATOR_H_
