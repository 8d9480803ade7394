// libmuster_comm: collectives between the ranks of a job, for C++ workers.
//
//   auto comm = muster::comm::Communicator::Init();  // env:// (under muster)
//   if (!comm.ok()) { std::cerr << comm.status() << "\n"; return 1; }
//   std::vector<float> grad = ...;
//   absl::Status s = (*comm)->AllReduce(absl::MakeSpan(grad),
//                                       muster::comm::ReduceOp::kAvg);
//
// BACKENDS. Gloo (TCP) for host memory; NCCL for CUDA device memory when the
// library was built with it and a GPU is present (CommOptions::backend).
//
// INIT METHODS (Communicator::Init), as PyTorch names them:
//   env://              the default. Under muster: the round's store from
//                       MUSTER_STORE_ENDPOINT / MUSTER_STORE_PREFIX. Without
//                       the launcher: MASTER_ADDR / MASTER_PORT, where rank 0
//                       serves a store on MASTER_PORT and the others connect
//                       to it. RANK and WORLD_SIZE give the rank and size
//                       unless passed.
//   tcp://HOST:PORT     rank 0 serves a store on PORT (all interfaces) and
//                       every rank connects to HOST:PORT.
//   file:///PATH        a store in a file shared by the ranks of one machine
//                       (flock). A file left behind by a killed run is found
//                       and cleared (its ranks' processes are gone) with a
//                       warning; one still in use by live processes of another
//                       run is refused with FAILED_PRECONDITION naming them.
//                       The last rank to shut down removes the file.
//
// ERRORS are absl::Status; no exception leaves this API. Codes carry retry
// meaning:
//   INVALID_ARGUMENT     a bad argument (null buffer, root or rank out of
//                        range, unknown dtype or op, overlapping buffers).
//                        The communicator stays usable.
//   FAILED_PRECONDITION  the configuration cannot work: not run under a
//                        launcher (a variable is missing), a bad interface or
//                        address, NCCL asked for where there is no GPU (the
//                        message names the CUDA error), device memory without
//                        NCCL, or the communicator was shut down.
//   DEADLINE_EXCEEDED    a peer did not join, or a collective did not finish,
//                        within its timeout.
//   ABORTED              a peer was lost (the message names its rank: "peer
//                        rank 2 was lost ..."), a peer's own collective failed
//                        (named likewise), or the launcher ended the round
//                        (its store namespace was dropped). Rejoin the next
//                        round.
//   UNAVAILABLE          a peer or the store could not be reached.
// After any error from an operation other than INVALID_ARGUMENT the
// communicator is broken (the ranks no longer agree on where they are in the
// sequence of operations): later operations return ABORTED with the first
// error's message. Create a new communicator (or, under muster, exit and let
// the launcher restart the round, or, under --recovery=in-place, call
// Recover(): see IN-PLACE RECOVERY, where later calls return
// FAILED_PRECONDITION naming the ended round instead).
//
// FAILURE DETECTION. A peer that dies mid-collective does not leave the others
// waiting for the timeout. Each communicator of more than one rank runs a
// small monitor (one thread):
//   * It holds one extra TCP connection to every peer, which carries nothing
//     but a goodbye at Shutdown. When a connection closes without a goodbye
//     (the peer's process exited or was killed, so its kernel closed the
//     socket), every rank learns it at once and aborts its operation in flight
//     with ABORTED "peer rank N was lost". TCP keepalive (about 25 s) covers a
//     peer whose machine vanished without closing anything.
//   * When an operation fails on one rank (its timeout, a broken connection),
//     that rank tells every peer over the same connections, and they abort
//     theirs with ABORTED naming it and its reason.
//   * It waits (a blocking Store Wait) on a key of the round's store that only
//     Shutdown writes. When the launcher ends the round — musterd drops the
//     round's namespace when a worker fails or a node is lost — the wait ends
//     with ABORTED and the operation in flight is aborted with it.
//   * It enforces each operation's timeout, for every algorithm alike.
// A hung peer (alive, connection open, not progressing) is found by the
// timeout, or by the launcher's watchdog reading the progress heartbeat
// (muster/comm/progress.h).
//
// SIGNALS: the first communicator sets SIGPIPE to ignored if it still has its
// default action (ending the process), as Python does at start-up: otherwise a
// peer that dies mid-collective would kill this process silently. A handler
// the program installed is kept.
//
// THREAD-SAFETY: every method but Recover may be called from any thread, but
// every rank must issue the same collectives (and NewGroup calls of the groups
// it is in), with the same counts, dtypes, ops and roots, in the same order.
// Collectives run one at a time, in the order they were issued on this rank (a
// blocking call issued while asynchronous ones are pending runs after them).
// Send and Recv are not ordered with collectives: they match each other by
// (peer, tag) in the order they were posted. rank(), world_size(),
// backend_name() never block. Recover replaces the communicator's insides: no
// other call on this communicator (rank() and RoundChanged() included) may
// run concurrently with it; Work::Wait on its operations may.
//
// IN-PLACE RECOVERY (muster --recovery=in-place). The agent keeps the
// workers of the nodes that survive a lost node, a newcomer or a worker
// failure elsewhere, and tells them the next round through a control channel
// (MUSTER_CONTROL_DIR, opened by Init/FromEnvironment; docs/architecture.md
// "Control channel"). A training loop:
//
//   for (;;) {
//     if (comm->RoundChanged()) { Recover(); continue; }  // at a step end
//     absl::Status s = comm->AllReduce(grad, ReduceOp::kAvg);
//     if (!s.ok() && comm->RoundChanged()) { Recover(); continue; }
//     if (!s.ok()) return s;
//     ...
//   }
//   where Recover() calls comm->Recover(timeout), then has rank 0 broadcast
//   the step and the parameters (a newcomer has neither), and redoes the
//   step.
//
// The guarantees:
//   * A collective interrupted by the loss of a peer fails as without the
//     channel: ABORTED "peer rank N ... was lost" (or the round's end, or the
//     peer's own failure), on every rank that was in it, within moments.
//   * BUFFERS of a failed collective: the input of an out-of-place call is
//     untouched; the output (and the data of an in-place call) is
//     unspecified: it may hold the old values, a partial result, or a mix. A
//     rank that needs the old values keeps a copy (train.cc keeps its
//     parameters and recomputes the step).
//   * The round then ENDED for this communicator: every later call (a
//     collective, Send/Recv, Start*, NewGroup) fails at once with
//     FAILED_PRECONDITION "round 3 ended (<why>); call Recover() ..." and
//     moves no byte, until Recover succeeds. RoundChanged() ends it the same
//     way when the agent announced a new round (a newcomer waits: grow at a
//     step boundary).
//   * WHICH RANKS CONTINUE: those whose agent kept them (survivors of the
//     lost node's failure, every rank of a job that grows). Recover returns
//     each one's new rank and world size: the survivors keep their order,
//     ranks compacted; newcomers come after them. A worker the agent did not
//     keep is stopped by it; Recover never returns in such a process.
//   * WORK objects of the ended round finish (never hang): an operation
//     queued or running when the round ended, or when Recover was called,
//     returns its failure or FAILED_PRECONDITION naming the round from
//     Work::Wait. Their buffers are free once Wait has returned.
//   * GROUPS made with NewGroup belong to their parent's round: they end with
//     it (their calls fail with FAILED_PRECONDITION "this group was made in
//     round 3, which ended; make the group again with NewGroup() after
//     Recover()"), are not recovered (ranks have changed), and are freed by
//     their owner. After Recover, make them again from the parent.
//   * Every transport is re-formed on the new round's store (Gloo's mesh, the
//     shared-memory segments, libmuster_comm's own mesh, the peer monitor);
//     NCCL shrinks its communicator (ncclCommShrink, NCCL >= 2.27) when the
//     new round holds exactly the survivors in their old order, else it is
//     aborted and initialised again. backend_name() may change (a job that
//     loses its Windows ranks goes back to Gloo).
//   * rank() and world_size() change only in Recover. The environment
//     (RANK, WORLD_SIZE, ...) keeps the first round's values: use these.
// Without the channel (no MUSTER_CONTROL_DIR: --recovery=restart, or not
// under muster) RoundChanged() is false and Recover() fails with
// FAILED_PRECONDITION: the launcher restarts the workers as always.
//
// BUFFERS: pointers are host memory for Gloo, device memory for NCCL. Counts
// are in elements of `dtype`. Out-of-place calls take an input and an output
// that must not overlap, except where a function says it may be in place.
#ifndef MUSTER_COMM_COMMUNICATOR_H_
#define MUSTER_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "muster/comm/types.h"

namespace muster::store {
class Store;
}  // namespace muster::store

namespace muster::comm {

class Communicator;
namespace internal {
class CommCore;
class WorkState;
struct Op;
void CrashForTesting(Communicator& comm);
}  // namespace internal

enum class Backend : int {
  // Gloo for host memory, plus NCCL for device memory when this build has
  // NCCL and a GPU is present. NCCL that cannot start on a machine with a GPU
  // leaves Gloo alone, with a warning naming why.
  kAuto = 0,
  kGloo = 1,
  // Device memory only. FAILED_PRECONDITION at Create/Init when this build
  // lacks NCCL, or when CUDA finds no usable GPU (the message names the CUDA
  // error: 35 is "insufficient driver", i.e. no driver or no device).
  kNccl = 2,
};

// Gloo's allreduce algorithms. kAuto picks by message size and rank count
// (docs/performance.md "Collectives" has the measurements behind it). The
// first four are Gloo's algorithm classes, which exchange through buffers
// registered in advance (one message per transfer); libmuster_comm keeps them
// built between calls of the same shape. The *_unbound ones are Gloo's
// option-based gloo::allreduce (no set-up, but a ready-to-receive message
// before each transfer).
enum class AllReduceAlgorithm : int {
  kAuto = 0,
  kRing = 1,             // Gloo's AllreduceRing.
  kRingChunked = 2,      // Gloo's AllreduceRingChunked.
  kHalvingDoubling = 3,  // Gloo's AllreduceHalvingDoubling.
  kBcube = 4,            // Gloo's AllreduceBcube (base 2).
  kRingUnbound = 5,      // gloo::allreduce, RING: reduce-scatter + allgather.
  kBcubeUnbound = 6,     // gloo::allreduce, BCUBE.
  // Through shared memory between the ranks of each host (reduce-scatter and
  // all-gather in a segment they all map), then Gloo between one leader per
  // host when the communicator spans hosts. kAuto takes it for every size on
  // one host, and from 64 KB across hosts. Without a host running two ranks
  // (or with MUSTER_SHM=0) it falls back to kAuto's Gloo choice, with a
  // warning.
  kShm = 7,
};

// "auto", "ring", "ring_chunked", "halving_doubling", "bcube", "ring_unbound",
// "bcube_unbound", "shm"; "unknown" outside the enum.
absl::string_view AllReduceAlgorithmName(AllReduceAlgorithm algorithm);

struct CommOptions {
  // How long initialization waits for every peer, and the default timeout of
  // each operation. The environment variable MUSTER_COMM_TIMEOUT (seconds, may
  // be fractional) overrides it. Default 30 minutes, as PyTorch's.
  absl::Duration timeout = absl::Minutes(30);

  // The network interface Gloo binds and advertises (for example "eth0").
  // Empty: MUSTER_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME, else see `hostname`.
  // The variables accept NCCL's syntax: "eth0" (the first interface whose name
  // starts with eth0), "=eth0" (exactly eth0), "^docker,lo" (the first
  // interface with an IP address whose name starts with none of these), and
  // lists "eth,ens". The choice is logged.
  std::string ifname;

  // The address or name Gloo binds and advertises, when no interface is named.
  // Empty: 127.0.0.1 when every rank runs on this machine (LOCAL_WORLD_SIZE ==
  // WORLD_SIZE, a file:// store, or ranks that share an in-process store),
  // else the first non-loopback IPv4 address of an interface that is up —
  // never the 127.0.1.1 that Debian maps the host name to.
  std::string hostname;

  // Which backend; MUSTER_COMM_BACKEND=auto|gloo|nccl overrides kAuto.
  Backend backend = Backend::kAuto;

  // Gloo's allreduce algorithm; MUSTER_GLOO_ALGORITHM=<a name of
  // AllReduceAlgorithmName> overrides kAuto. For measurements.
  AllReduceAlgorithm allreduce_algorithm = AllReduceAlgorithm::kAuto;

  // Which host this rank runs on, for the shared-memory transport: ranks with
  // the same host_id exchange through shared memory (they must see the same
  // /dev/shm; a rank that cannot map the segment makes every rank fall back
  // to Gloo, with a warning). Empty: MUSTER_HOST_ID, else the host name and
  // the kernel's boot id. Setting it lets tests pose as several hosts on one.
  // MUSTER_SHM=0 turns the transport off.
  std::string host_id;

  // The CUDA device NCCL uses; -1: LOCAL_RANK modulo the number of devices.
  int cuda_device = -1;

  // Where collectives record progress (muster/comm/progress.h). Empty:
  // MUSTER_PROGRESS_FILE; neither: nowhere.
  std::string progress_file;

  // The control channel of in-place recovery (see IN-PLACE RECOVERY): the
  // worker's directory, where this library writes `hello` and reads `round`.
  // Empty: MUSTER_CONTROL_DIR for Init and FromEnvironment (the agent sets it
  // under --recovery=in-place); none for Create. Tests play the agent with it.
  std::string control_dir;
};

// What Recover returns: this rank's place in the round it joined.
struct RecoverResult {
  int rank = 0;
  int world_size = 0;
  int previous_rank = 0;
  int previous_world_size = 0;
  int64_t round = 0;  // The launcher's round number.
};

// Options of one call.
struct CallOptions {
  // This operation's timeout, counted from when it starts running; zero or
  // negative: the communicator's (CommOptions::timeout, which also bounds
  // this one: the backends' own waits are set up with it).
  absl::Duration timeout = absl::ZeroDuration();
};

// The handle of an asynchronous operation. Thread-safe. Destroying it does not
// cancel the operation: its buffers must stay valid until it has finished
// (Wait returned something other than the "still running" error, Done() is
// true) or the communicator was shut down.
class Work {
 public:
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the operation has finished or `timeout` passes. Returns the
  // operation's status. When `timeout` passes first: DEADLINE_EXCEEDED with
  // "still running" in the message, and the operation goes on (its own timeout
  // still applies); Wait may be called again.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration());

  // Whether the operation has finished. Never blocks.
  bool Done() const;

  // For the library: use the Start* methods of Communicator.
  explicit Work(std::shared_ptr<internal::WorkState> state);

 private:
  std::shared_ptr<internal::WorkState> state_;
};

// One rank's endpoint of a communicator. Opaque. See the file comment for
// errors and thread-safety.
class Communicator {
 public:
  // Joins a communicator through `init_method` ("env://", "tcp://HOST:PORT",
  // "file:///PATH"; empty means env://; see the file comment). rank and
  // world_size < 0 read RANK and WORLD_SIZE. Blocks until every rank is
  // connected, or options.timeout passes. Thread-safe. Errors:
  // INVALID_ARGUMENT (an unknown scheme, a malformed address or variable);
  // FAILED_PRECONDITION naming a missing variable, or a file store in use by
  // another run; UNAVAILABLE when the store cannot be reached or served (rank
  // 0 cannot listen on the port: the message names who holds it); and the
  // errors of Create.
  static absl::StatusOr<std::unique_ptr<Communicator>> Init(
      absl::string_view init_method = "env://", int rank = -1,
      int world_size = -1, CommOptions options = {});

  // Joins the job this process was launched into by muster: RANK, WORLD_SIZE,
  // LOCAL_WORLD_SIZE, MUSTER_STORE_ENDPOINT and MUSTER_STORE_PREFIX. Blocks
  // until every rank is connected, or options.timeout passes. Thread-safe.
  // Errors: FAILED_PRECONDITION naming the first missing variable (run the
  // program under muster); INVALID_ARGUMENT naming a variable that is not a
  // valid number, or a bad MUSTER_COMM_TIMEOUT; UNAVAILABLE when the store
  // cannot be reached; and the errors of Create.
  static absl::StatusOr<std::unique_ptr<Communicator>> FromEnvironment(
      CommOptions options = {});

  // Joins a communicator of `world_size` ranks as `rank`, bootstrapping through
  // `store` (every rank must see the same namespace of it). Blocks until every
  // rank is connected to every other, or options.timeout passes. Ranks may
  // call Create several times on one store: the n-th call of each rank joins
  // the n-th communicator. Thread-safe (ranks may be threads of one process).
  // Errors: INVALID_ARGUMENT (null store, world_size < 1, rank outside [0,
  // world_size), timeout not positive, a bad MUSTER_COMM_* variable);
  // FAILED_PRECONDITION when the interface or address to bind does not exist,
  // or the backend cannot run here (NCCL without a GPU); DEADLINE_EXCEEDED
  // naming the ranks that did not join in time; UNAVAILABLE or ABORTED when a
  // peer or the store cannot be reached or is lost while connecting.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      std::shared_ptr<store::Store> store, int rank, int world_size,
      CommOptions options = {});

  // Shuts down (see Shutdown) and frees the communicator.
  ~Communicator();

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This rank in [0, world_size()), the number of ranks, and the backend that
  // serves host memory ("gloo"; "direct" when the ranks cannot share a Gloo
  // mesh: Linux and Windows ranks, or MUSTER_COMM_MESH=direct) or device
  // memory only ("nccl"). Never block.
  int rank() const;
  int world_size() const;
  absl::string_view backend_name() const;

  // ---- Subgroups ----

  // A communicator over the parent ranks `ranks` (any order, no duplicates);
  // a member's rank in it is its position in the sorted list. Every member
  // must call NewGroup with the same list; non-members need not call it, and
  // get nullptr when they do. Groups of the same list created one after
  // another are distinct communicators (a per-list counter). The group shares
  // nothing with its parent but the store: either may be used or shut down
  // independently. `options` as for Create; by default the parent's. Blocks
  // until every member is connected. Errors: INVALID_ARGUMENT (empty list, a
  // rank out of range, a duplicate); FAILED_PRECONDITION after Shutdown; and
  // the errors of Create.
  absl::StatusOr<std::unique_ptr<Communicator>> NewGroup(
      absl::Span<const int> ranks);
  absl::StatusOr<std::unique_ptr<Communicator>> NewGroup(
      absl::Span<const int> ranks, CommOptions options);

  // ---- Collectives ----
  // Each blocks until this rank's part is done (its output is complete and its
  // input may be reused), or the timeout passes, and returns the errors of the
  // file comment; INVALID_ARGUMENT for null buffers with count > 0, an unknown
  // dtype or op, a root or peer outside [0, world_size), or buffers that
  // overlap where they must not. count == 0 returns at once.

  // Reduces `count` elements element-wise over all ranks with `op`: afterwards
  // every rank's `output` holds the same result, bit for bit. input == output
  // is in place; other overlap is INVALID_ARGUMENT. Floating-point sums are
  // rounded in an order that does not depend on the rank. Integer overflow
  // wraps.
  absl::Status AllReduce(const void* input, void* output, size_t count,
                         DataType dtype, ReduceOp op,
                         const CallOptions& call = {});
  // In place.
  absl::Status AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                         const CallOptions& call = {}) {
    return AllReduce(data, data, count, dtype, op, call);
  }

  // Reduces `input` over all ranks into `output` on rank `root` only. On other
  // ranks `output` is neither read nor written and may be null. input ==
  // output is in place.
  absl::Status Reduce(const void* input, void* output, size_t count,
                      DataType dtype, ReduceOp op, int root,
                      const CallOptions& call = {});

  // Copies `count` elements of `data` on rank `root` into `data` on every
  // other rank.
  absl::Status Broadcast(void* data, size_t count, DataType dtype, int root,
                         const CallOptions& call = {});

  // Gathers `count` elements of `input` from every rank into `output` on every
  // rank (world_size() * count elements): rank r's input lands at output +
  // r * count. `input` may be exactly that slot of `output` (in place).
  absl::Status AllGather(const void* input, void* output, size_t count,
                         DataType dtype, const CallOptions& call = {});

  // As AllGather, with a count per rank: rank r contributes counts[r]
  // elements (its `input`), and they land one after another in rank order in
  // `output`, which holds the sum of counts. counts.size() must be
  // world_size() and equal on every rank. In place when input is this rank's
  // slot of output.
  absl::Status AllGatherV(const void* input, void* output,
                          absl::Span<const size_t> counts, DataType dtype,
                          const CallOptions& call = {});

  // Gathers `count` elements from every rank into `output` on `root`
  // (world_size() * count elements, in rank order). Elsewhere `output` is
  // neither read nor written and may be null.
  absl::Status Gather(const void* input, void* output, size_t count,
                      DataType dtype, int root, const CallOptions& call = {});

  // Sends block r (`count` elements at input + r * count) of `input` on `root`
  // to rank r's `output`. Elsewhere `input` is not read and may be null.
  absl::Status Scatter(const void* input, void* output, size_t count,
                       DataType dtype, int root, const CallOptions& call = {});

  // Reduces world_size() * count elements of `input` element-wise over the
  // ranks and leaves block r of the result (`count` elements) in rank r's
  // `output`. In place when output is this rank's block of input.
  absl::Status ReduceScatter(const void* input, void* output, size_t count,
                             DataType dtype, ReduceOp op,
                             const CallOptions& call = {});

  // Block j (`count` elements) of this rank's input goes to rank j, which
  // stores it as block (this rank) of its output. Both hold world_size() *
  // count elements and must not overlap.
  absl::Status AllToAll(const void* input, void* output, size_t count,
                        DataType dtype, const CallOptions& call = {});

  // Returns once every rank has called Barrier.
  absl::Status Barrier(const CallOptions& call = {});

  // ---- Point to point ----
  // Send blocks until `peer` has posted the matching Recv (same tag) and the
  // data has left this process; Recv until the data has arrived. Matching is
  // in posting order per (peer, tag). INVALID_ARGUMENT for peer == rank().
  absl::Status Send(const void* data, size_t count, DataType dtype, int peer,
                    uint32_t tag = 0, const CallOptions& call = {});
  absl::Status Recv(void* data, size_t count, DataType dtype, int peer,
                    uint32_t tag = 0, const CallOptions& call = {});

  // ---- Asynchronous variants ----
  // Each validates its arguments at once (an error is returned right away and
  // nothing runs), then queues the operation and returns its Work; errors of
  // the operation itself come from Work::Wait. Collectives run in issue
  // order; StartSend/StartRecv post at once, so that two ranks may each
  // StartSend and then StartRecv without deadlock. Never block for long.
  absl::StatusOr<std::unique_ptr<Work>> StartAllReduce(
      const void* input, void* output, size_t count, DataType dtype,
      ReduceOp op, const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartReduce(
      const void* input, void* output, size_t count, DataType dtype,
      ReduceOp op, int root, const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartBroadcast(
      void* data, size_t count, DataType dtype, int root,
      const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartAllGather(
      const void* input, void* output, size_t count, DataType dtype,
      const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartAllGatherV(
      const void* input, void* output, absl::Span<const size_t> counts,
      DataType dtype, const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartGather(
      const void* input, void* output, size_t count, DataType dtype, int root,
      const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartScatter(
      const void* input, void* output, size_t count, DataType dtype, int root,
      const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartReduceScatter(
      const void* input, void* output, size_t count, DataType dtype,
      ReduceOp op, const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartAllToAll(
      const void* input, void* output, size_t count, DataType dtype,
      const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartBarrier(
      const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartSend(const void* data,
                                                  size_t count, DataType dtype,
                                                  int peer, uint32_t tag = 0,
                                                  const CallOptions& call = {});
  absl::StatusOr<std::unique_ptr<Work>> StartRecv(void* data, size_t count,
                                                  DataType dtype, int peer,
                                                  uint32_t tag = 0,
                                                  const CallOptions& call = {});

  // ---- Typed conveniences (T: see DataTypeOf) ----
  template <typename T>
  absl::Status AllReduce(absl::Span<T> data, ReduceOp op,
                         const CallOptions& call = {}) {
    return AllReduce(data.data(), data.data(), data.size(), DataTypeOf<T>(), op,
                     call);
  }
  template <typename T>
  absl::Status Broadcast(absl::Span<T> data, int root,
                         const CallOptions& call = {}) {
    return Broadcast(data.data(), data.size(), DataTypeOf<T>(), root, call);
  }
  // INVALID_ARGUMENT unless output.size() is world_size() * input.size().
  template <typename T>
  absl::Status AllGather(absl::Span<const T> input, absl::Span<T> output,
                         const CallOptions& call = {}) {
    if (output.size() != input.size() * static_cast<size_t>(world_size())) {
      return absl::InvalidArgumentError(
          "AllGather: output must hold world_size() * input.size() elements");
    }
    return AllGather(input.data(), output.data(), input.size(), DataTypeOf<T>(),
                     call);
  }

  // ---- In-place recovery (see IN-PLACE RECOVERY in the file comment) ----

  // Whether this communicator's round has ended: the agent announced the
  // next round (a newcomer waits, a node was lost, a worker failed
  // elsewhere), or an operation failed. Once true, every call but Recover
  // fails with FAILED_PRECONDITION naming the round. Call it between steps.
  // One small file read (a few microseconds), never blocks. Always false
  // without the control channel. Thread-safe, but not concurrently with
  // Recover. On a group: whether its
  // parent's round ended.
  bool RoundChanged();

  // Joins the next round in place: ends this one (operations queued or in
  // flight fail, see Work), waits up to `timeout` for the agent to announce a
  // round after the current one (polling every 2 ms), re-forms every
  // transport on that round's store, and returns this rank's new place.
  // If that round ends too while it forms (a second loss), waits for the
  // next, within the same timeout. Call it on every kept rank (all of them
  // must, as for a collective), after a failure or RoundChanged(); the
  // communicator is then usable again. Not concurrently with any other call
  // on this communicator. Errors: FAILED_PRECONDITION without the control
  // channel, on a group (make it again with NewGroup), or after Shutdown;
  // DEADLINE_EXCEEDED naming the control directory and the round waited from
  // when no round comes (the agent is gone, or no round could form), with
  // the last attempt's error if one failed; the communicator then stays
  // ended (Recover may be called again).
  absl::StatusOr<RecoverResult> Recover(
      absl::Duration timeout = absl::Minutes(5));

  // ---- Lifecycle ----

  // Waits (up to the timeout) for queued asynchronous operations, tells the
  // peers goodbye, and closes every connection; peers still in an operation
  // with this rank get ABORTED naming it. Later operations return
  // FAILED_PRECONDITION. Idempotent and thread-safe; blocks at most about the
  // operation timeout (normally milliseconds).
  void Shutdown();

  // For the library's factories.
  explicit Communicator(std::unique_ptr<internal::CommCore> core);

 private:
  friend void internal::CrashForTesting(Communicator& comm);

  // Validates op and runs it on this thread / queues it.
  absl::Status Run(internal::Op op);
  absl::StatusOr<std::unique_ptr<Work>> Start(internal::Op op);

  std::unique_ptr<internal::CommCore> core_;
};

}  // namespace muster::comm

#endif  // MUSTER_COMM_COMMUNICATOR_H_
