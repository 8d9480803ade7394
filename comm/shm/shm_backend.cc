#include "comm/shm/shm_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "comm/reduce/reduce.h"
#include "comm/shm/copy.h"
#include "comm/shm/platform.h"
#include "comm/shm/topology.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"
#include "muster/platform/env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MUSTER_CPU_RELAX() _mm_pause()
#else
#define MUSTER_CPU_RELAX() \
  do {                     \
  } while (0)
#endif

namespace muster::comm::internal {

// ---- The automatic choice ----
//
// One host: shared memory for every size. Measured on the reference machine
// (2 ranks, docs/performance.md "Shared memory"): a barrier on the segment
// costs a few microseconds where a Gloo message on loopback costs 30-80, and
// large messages cross memory once or twice instead of through the kernel's
// TCP stack twice.
// Across hosts: the leaders' Gloo allreduce then carries the whole message
// once per host instead of once per rank; below this size the extra
// intra-host steps are not worth it (an estimate: this project has no
// multi-host machine to measure on).
constexpr size_t kHierarchicalMinBytes = 64 << 10;

bool SharedMemoryChosen(size_t bytes, bool hierarchical) {
  return !hierarchical || bytes >= kHierarchicalMinBytes;
}

namespace {

using shm::SharedRegion;

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futexes need plain, lock-free 32-bit words");

constexpr uint64_t kMagic = 0x6d75737465727368ULL;  // "mustersh"
constexpr size_t kLine = 128;  // Two cache lines: adjacent-line prefetch.
constexpr size_t kPage = 4096;
// Per-rank slot of each set: the pipeline's unit, one barrier each. Large
// enough that the barriers cost little on a machine whose cores are shared
// (a rank that waits for a descheduled peer loses its time slice: with
// 256 KB chunks a 16 MB allreduce took 3x longer here than with 2 MB), small
// enough that a chunk of every rank stays in the shared L3 cache between
// being written and being read.
constexpr size_t kDefaultChunkBytes = 2 << 20;
// Messages up to this size times the number of local ranks take one barrier:
// every rank copies in, then each reduces the whole message itself (reading
// every rank's copy), which costs less than a second barrier up to there,
// and much less when a peer may be descheduled between the two.
constexpr size_t kOneStepMaxReadBytes = 128 << 10;
// Outputs from this size are written with non-temporal stores (StreamCopy):
// copying 2 MB chunks into a 64 MB output took 8.4-10.4 ms that way against
// 13.6-14.4 ms with memcpy here. Smaller outputs stay in the caches for the
// caller.
constexpr size_t kStreamMinBytes = 8 << 20;
// A rank reduces its slice of a chunk in blocks of this size, each copied
// to both the output and the segment while it is in the L1/L2 cache.
constexpr size_t kReduceBlockBytes = 32 << 10;
// A waiting rank spins this many times, then yields this many times, then
// sleeps on a futex.
constexpr int kSpins = 256;
constexpr int kYields = 16;
// How often a waiting rank checks that its local peers' processes exist.
constexpr absl::Duration kLivenessPeriod = absl::Milliseconds(200);
// The longest futex sleep between checks (abort, deadline, liveness).
constexpr absl::Duration kMaxSleep = absl::Milliseconds(50);

struct Header {
  uint64_t magic;
  uint64_t token;
  uint64_t ranks;
  uint64_t chunk_bytes;
};

// Values of Control::aborted.
constexpr uint32_t kAborted = 1;  // Its communicator failed.
constexpr uint32_t kClosed = 2;   // It shut its communicator down.

struct alignas(kLine) Control {
  std::atomic<uint32_t> arrived;  // The last barrier this rank reached.
  std::atomic<uint32_t> waiters;  // Ranks asleep on `arrived`.
  std::atomic<uint32_t> aborted;  // 0, kAborted or kClosed.
  uint32_t reserved;
  int64_t pid;
};
static_assert(sizeof(Control) == kLine);

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t DataOffset(int ranks) {
  return RoundUp(kLine + static_cast<size_t>(ranks) * kLine, kPage);
}

size_t SegmentBytes(int ranks, size_t chunk) {
  return DataOffset(ranks) + 2 * (static_cast<size_t>(ranks) + 1) * chunk;
}

// The chunk size for `ranks` local ranks: kDefaultChunkBytes for 2, less for
// more (the segment holds 2 (ranks + 1) chunks: about 12 MB whatever the
// count, down to 256 KB chunks), or MUSTER_SHM_CHUNK_BYTES.
size_t ChunkBytes(int ranks) {
  size_t chunk = std::clamp<size_t>(2 * kDefaultChunkBytes / std::max(ranks, 1),
                                    256 << 10, kDefaultChunkBytes);
  if (const char* env = platform::NonEmptyEnv("MUSTER_SHM_CHUNK_BYTES")) {
    uint64_t value = 0;
    if (absl::SimpleAtoi(env, &value) && value >= (64 << 10) &&
        value <= (64 << 20)) {
      chunk = value;
    } else {
      MUSTER_LOG(WARNING) << "MUSTER_SHM_CHUNK_BYTES=" << env
                          << " is not a number of bytes in [64K, 64M]; using "
                          << chunk;
    }
  }
  return RoundUp(chunk, kPage);
}

class ShmBackend final : public Backend {
 public:
  ShmBackend(const CoreConfig& config, Topology topology,
             std::unique_ptr<SharedRegion> region, size_t chunk_bytes,
             bool check_pids, std::unique_ptr<Backend> gloo,
             std::unique_ptr<Backend> leaders)
      : who_(absl::StrCat("rank ", config.rank, "/", config.world_size)),
        world_size_(config.world_size),
        algorithm_(config.options.allreduce_algorithm),
        topology_(std::move(topology)),
        local_size_(static_cast<int>(topology_.local.size())),
        me_(topology_.local_rank),
        chunk_bytes_(chunk_bytes),
        check_pids_(check_pids),
        region_(std::move(region)),
        base_(region_ != nullptr ? static_cast<char*>(region_->data())
                                 : nullptr),
        gloo_(std::move(gloo)),
        leaders_(std::move(leaders)) {}

  ~ShmBackend() override { Close(); }

  absl::string_view name() const override { return gloo_->name(); }

  absl::Status Run(const Op& op, absl::Time deadline) override {
    if (op.kind != OpKind::kAllReduce || !Wanted(op)) {
      return gloo_->Run(op, deadline);
    }
    const size_t bytes = op.count * DataTypeSize(op.dtype);
    if (bytes == 0) return absl::OkStatus();
    if (topology_.num_hosts == 1) return AllReduceLocal(op, bytes, deadline);
    return AllReduceHierarchical(op, bytes, deadline);
  }

  absl::StatusOr<std::unique_ptr<PendingP2P>> Post(const Op& op) override {
    return gloo_->Post(op);
  }

  void Abort(const absl::Status& why) override {
    {
      absl::MutexLock lock(&mu_);
      if (aborted_.exchange(true) || closed_) return;
      if (base_ != nullptr) {
        control(me_).aborted.store(kAborted, std::memory_order_seq_cst);
        for (int k = 0; k < local_size_; ++k) {
          shm::WakeAll(&control(k).arrived);
        }
      }
    }
    MUSTER_LOG(DEBUG) << who_ << ": aborting the shared-memory transport ("
                      << why << ")";
    gloo_->Abort(why);
    if (leaders_ != nullptr) leaders_->Abort(why);
  }

  void Close() override {
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      // A local peer that waits for this rank from now on waits in vain: it
      // is told (and woken), unless this rank aborted already.
      if (base_ != nullptr && !aborted_.exchange(true)) {
        control(me_).aborted.store(kClosed, std::memory_order_seq_cst);
        for (int k = 0; k < local_size_; ++k) {
          shm::WakeAll(&control(k).arrived);
        }
      }
      aborted_ = true;
    }
    if (leaders_ != nullptr) leaders_->Close();
    gloo_->Close();
    region_.reset();
  }

 private:
  // ---- The choice ----

  bool Wanted(const Op& op) const {
    if (algorithm_ == AllReduceAlgorithm::kShm) return true;
    if (algorithm_ != AllReduceAlgorithm::kAuto) return false;
    return SharedMemoryChosen(op.count * DataTypeSize(op.dtype),
                              topology_.num_hosts > 1);
  }

  // ---- The segment ----

  Control& control(int k) const {
    return *reinterpret_cast<Control*>(base_ + kLine + k * kLine);
  }
  char* slot(int set, int k) const {
    return base_ + DataOffset(local_size_) +
           (static_cast<size_t>(set) * (local_size_ + 1) + k) * chunk_bytes_;
  }
  // Where the local ranks put their reduced slices of a chunk.
  char* result(int set) const { return slot(set, local_size_); }
  // The set the next step writes.
  int NextSet() { return static_cast<int>(step_++ & 1); }

  // ---- Waiting ----

  absl::Status Barrier(absl::Time deadline) {
    const uint32_t gen = ++generation_;
    Control& mine = control(me_);
    mine.arrived.store(gen, std::memory_order_seq_cst);
    if (mine.waiters.load(std::memory_order_seq_cst) != 0) {
      shm::WakeAll(&mine.arrived);
    }
    for (int k = 0; k < local_size_; ++k) {
      if (k == me_) continue;
      MUSTER_RETURN_IF_ERROR(WaitFor(k, gen, deadline));
    }
    return absl::OkStatus();
  }

  static bool Reached(uint32_t value, uint32_t gen) {
    return static_cast<int32_t>(value - gen) >= 0;
  }

  // Spin, then yield, then sleep until local peer k reaches barrier `gen`.
  absl::Status WaitFor(int k, uint32_t gen, absl::Time deadline) {
    Control& peer = control(k);
    // A short spin (a few microseconds: a pause takes ~65 cycles on AMD
    // Zen): a longer one, on a machine whose cores other processes share,
    // holds the core the peer waits to run on (4096 pauses made every small
    // allreduce take ~100 us here).
    const int spins = spin_ ? kSpins : 0;
    for (int i = 0; i < spins; ++i) {
      if (Reached(peer.arrived.load(std::memory_order_acquire), gen)) {
        return absl::OkStatus();
      }
      MUSTER_CPU_RELAX();
    }
    for (int i = 0; i < kYields; ++i) {
      if (Reached(peer.arrived.load(std::memory_order_acquire), gen)) {
        return absl::OkStatus();
      }
      shm::YieldThread();
    }
    absl::Time next_liveness = absl::Now() + kLivenessPeriod;
    while (true) {
      MUSTER_RETURN_IF_ERROR(CheckPeers(deadline, k, gen, next_liveness));
      peer.waiters.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = peer.arrived.load(std::memory_order_seq_cst);
      if (!Reached(seen, gen)) {
        shm::WaitOnWord(&peer.arrived, seen,
                        std::min(kMaxSleep, std::max(deadline - absl::Now(),
                                                     absl::Microseconds(1))));
      }
      peer.waiters.fetch_sub(1, std::memory_order_seq_cst);
      if (Reached(peer.arrived.load(std::memory_order_acquire), gen)) {
        return absl::OkStatus();
      }
    }
  }

  // Whether the wait for local peer `k` to reach barrier `gen` must end:
  // this rank or a local peer aborted, a local peer that has not reached it
  // shut down, the deadline passed, or a local peer's process is gone.
  absl::Status CheckPeers(absl::Time deadline, int k, uint32_t gen,
                          absl::Time& next_liveness) {
    if (aborted_.load(std::memory_order_acquire)) {
      return absl::AbortedError("the shared-memory collective was aborted");
    }
    for (int j = 0; j < local_size_; ++j) {
      if (j == me_) continue;
      const uint32_t state = control(j).aborted.load(std::memory_order_acquire);
      if (state == kAborted) {
        return EchoedFailure(
            absl::StrCat("peer rank ", topology_.local[j],
                         " aborted its shared-memory collective"));
      }
      // A peer shuts down after its last collective: only one that has not
      // reached this barrier is missing from it.
      if (state == kClosed &&
          !Reached(control(j).arrived.load(std::memory_order_acquire), gen)) {
        return absl::AbortedError(absl::StrCat(
            "peer rank ", topology_.local[j],
            " has shut down its communicator and will not join this "
            "collective"));
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "waiting for peer rank ", topology_.local[k], " in shared memory"));
    }
    if (check_pids_ && now >= next_liveness) {
      next_liveness = now + kLivenessPeriod;
      for (int j = 0; j < local_size_; ++j) {
        if (j == me_) continue;
        const int64_t pid = control(j).pid;
        if (!shm::ProcessExists(pid)) {
          return absl::AbortedError(absl::StrCat(
              "peer rank ", topology_.local[j], " (pid ", pid,
              ") was lost: its process ended during a shared-memory "
              "collective"));
        }
      }
    }
    return absl::OkStatus();
  }

  // ---- Allreduce on one host ----

  // Element range [begin, end) of local rank k's slice of n elements, cut on
  // 64-byte boundaries.
  void Slice(size_t n, size_t esize, int k, size_t* begin, size_t* end) const {
    const size_t unit = std::max<size_t>(1, 64 / esize);
    const size_t per = RoundUp((n + local_size_ - 1) / local_size_, unit);
    *begin = std::min(n, per * k);
    *end = std::min(n, *begin + per);
  }

  // Reduce-scatter then all-gather through the segment, one chunk at a time,
  // pipelined so that each chunk costs one barrier:
  // clang-format off
  //
  //   step c:  copy chunk c in  | barrier | reduce my slice of c into out and
  //                                       |   result(c)
  //                                       | gather c-1's other slices from
  //                                       |   result(c-1)
  //   end:     barrier | gather the last chunk
  //
  // clang-format on
  // A rank's slice of its own chunk is never copied in: it reduces it
  // straight from its input. `to_all`: every rank gathers the result into
  // `out`; otherwise only the local leader does (the first half of the
  // hierarchical allreduce). `divide_by`: kAvg's divisor, applied to each
  // slice once (0: none).
  absl::Status ReduceChunks(const char* in, char* out, size_t count,
                            DataType dtype, const ReduceFn& fn, bool to_all,
                            int divide_by, absl::Time deadline) {
    const size_t esize = DataTypeSize(dtype);
    const size_t per_chunk = chunk_bytes_ / esize;
    const bool gathers = to_all || me_ == 0;
    // The chunk reduced in the previous step, gathered in this one.
    int last_set = -1;
    size_t last_first = 0;
    size_t last_n = 0;
    // An output far larger than the caches is written around them: no
    // read of each line before it is overwritten, a third less memory
    // traffic for the whole allreduce.
    const bool stream = count * esize >= kStreamMinBytes;
    auto copy_out = [&](char* dst, const char* src, size_t bytes) {
      if (stream) {
        shm_copy::StreamCopy(dst, src, bytes);
      } else {
        std::memcpy(dst, src, bytes);
      }
    };
    // This rank's own slice went to `out` as it was reduced: only the
    // peers' slices are gathered (half the copy-out on 2 ranks).
    size_t last_b = 0;
    size_t last_e = 0;
    auto gather_last = [&] {
      if (last_set < 0 || !gathers) return;
      char* dst = out + last_first * esize;
      const char* src = result(last_set);
      copy_out(dst, src, last_b * esize);
      copy_out(dst + last_e * esize, src + last_e * esize,
               (last_n - last_e) * esize);
    };
    for (size_t first = 0; first < count; first += per_chunk) {
      const size_t n = std::min(per_chunk, count - first);
      const char* src = in + first * esize;
      const int set = NextSet();
      char* own = slot(set, me_);
      size_t b = 0;
      size_t e = 0;
      Slice(n, esize, me_, &b, &e);
      std::memcpy(own, src, b * esize);
      std::memcpy(own + e * esize, src + e * esize, (n - e) * esize);
      MUSTER_RETURN_IF_ERROR(Barrier(deadline));
      ReduceSlice(src, gathers ? out + first * esize : nullptr, set, b, e,
                  esize, dtype, fn, divide_by);
      gather_last();
      last_set = set;
      last_first = first;
      last_n = n;
      last_b = b;
      last_e = e;
    }
    MUSTER_RETURN_IF_ERROR(Barrier(deadline));
    gather_last();
    return absl::OkStatus();
  }

  // Reduces elements [b, e) of the chunk at `src` (this rank's input) with
  // the peers' copies in `set` into result(set), and into `out` (the
  // chunk's place in the output) unless null. Block by block, so that each
  // block is reduced once and copied from the L1/L2 cache: the output's
  // slice is not read back from the segment a step later.
  void ReduceSlice(const char* src, char* out, int set, size_t b, size_t e,
                   size_t esize, DataType dtype, const ReduceFn& fn,
                   int divide_by) const {
    const size_t block = kReduceBlockBytes / esize;
    for (size_t i = b; i < e; i += block) {
      const size_t m = std::min(block, e - i);
      const size_t at = i * esize;
      // Into `out` first when there is one: in place, its lines are the
      // input's, already in the cache.
      char* acc = out != nullptr ? out + at : result(set) + at;
      // Same order on every rank (own input, then the peers by local rank),
      // so the bits do not depend on the block size.
      bool first_peer = true;
      for (int k = 0; k < local_size_; ++k) {
        if (k == me_) continue;
        fn(acc, first_peer ? src + at : acc, slot(set, k) + at, m);
        first_peer = false;
      }
      if (divide_by > 0) DivideInPlace(acc, m, dtype, divide_by);
      if (out != nullptr) std::memcpy(result(set) + at, acc, m * esize);
    }
  }

  // Small messages: one barrier; every rank reduces the whole message.
  absl::Status ReduceOneStep(const char* in, char* out, size_t count,
                             DataType dtype, const ReduceFn& fn, bool to_all,
                             int divide_by, absl::Time deadline) {
    const size_t bytes = count * DataTypeSize(dtype);
    const int set = NextSet();
    std::memcpy(slot(set, me_), in, bytes);
    MUSTER_RETURN_IF_ERROR(Barrier(deadline));
    if (!to_all && me_ != 0) return absl::OkStatus();
    // The same order on every rank (0, 1, 2, ...), so every rank computes the
    // same bits.
    fn(out, slot(set, 0), slot(set, 1), count);
    for (int k = 2; k < local_size_; ++k) fn(out, out, slot(set, k), count);
    if (divide_by > 0) DivideInPlace(out, count, dtype, divide_by);
    return absl::OkStatus();
  }

  absl::Status ReduceLocal(const Op& op, size_t bytes, bool to_all,
                           int divide_by, absl::Time deadline) {
    MUSTER_ASSIGN_OR_RETURN(ReduceFn fn, ReduceFunction(op.dtype, op.op));
    const char* in = static_cast<const char*>(op.input);
    char* out = static_cast<char*>(op.output);
    if (bytes * local_size_ <= kOneStepMaxReadBytes && bytes <= chunk_bytes_) {
      return ReduceOneStep(in, out, op.count, op.dtype, fn, to_all, divide_by,
                           deadline);
    }
    return ReduceChunks(in, out, op.count, op.dtype, fn, to_all, divide_by,
                        deadline);
  }

  absl::Status AllReduceLocal(const Op& op, size_t bytes, absl::Time deadline) {
    return ReduceLocal(op, bytes, /*to_all=*/true,
                       op.op == ReduceOp::kAvg ? world_size_ : 0, deadline);
  }

  // ---- Across hosts ----

  // The local leader's data to every local rank, one chunk at a time.
  absl::Status BroadcastFromLeader(char* data, size_t bytes,
                                   absl::Time deadline) {
    for (size_t first = 0; first < bytes; first += chunk_bytes_) {
      const size_t n = std::min(chunk_bytes_, bytes - first);
      const int set = NextSet();
      if (me_ == 0) std::memcpy(slot(set, 0), data + first, n);
      MUSTER_RETURN_IF_ERROR(Barrier(deadline));
      if (me_ != 0) std::memcpy(data + first, slot(set, 0), n);
    }
    return absl::OkStatus();
  }

  // Reduce on each host to its leader, allreduce between the leaders over
  // Gloo, broadcast on each host from its leader.
  absl::Status AllReduceHierarchical(const Op& op, size_t bytes,
                                     absl::Time deadline) {
    char* out = static_cast<char*>(op.output);
    if (local_size_ > 1) {
      MUSTER_RETURN_IF_ERROR(
          ReduceLocal(op, bytes, /*to_all=*/false, 0, deadline));
    } else if (op.input != op.output) {
      std::memcpy(out, op.input, bytes);
    }
    if (me_ == 0) {
      Op across = op;
      across.input = out;
      across.output = out;
      if (across.op == ReduceOp::kAvg) across.op = ReduceOp::kSum;
      MUSTER_RETURN_IF_ERROR(leaders_->Run(across, deadline));
      if (op.op == ReduceOp::kAvg) {
        DivideInPlace(out, op.count, op.dtype, world_size_);
      }
    }
    if (local_size_ > 1) {
      MUSTER_RETURN_IF_ERROR(BroadcastFromLeader(out, bytes, deadline));
    }
    return absl::OkStatus();
  }

  const std::string who_;
  const int world_size_;
  const AllReduceAlgorithm algorithm_;
  const Topology topology_;
  const int local_size_;
  const int me_;  // Local rank.
  const size_t chunk_bytes_;
  const bool check_pids_;
  // More ranks here than cores: spinning would take the core from the rank
  // being waited for.
  const bool spin_ =
      local_size_ <= static_cast<int>(std::thread::hardware_concurrency());
  std::unique_ptr<SharedRegion> region_;  // Null when this host has 1 rank.
  char* const base_;
  std::unique_ptr<Backend> gloo_;
  std::unique_ptr<Backend> leaders_;  // This host's leader only, across hosts.

  // Touched by the thread running collectives only (one at a time).
  uint32_t generation_ = 0;
  uint64_t step_ = 0;

  std::atomic<bool> aborted_{false};
  absl::Mutex mu_;  // Abort vs Close.
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// A mapped segment, or why this rank has none (reported in step 3 below).
struct Segment {
  std::unique_ptr<SharedRegion> region;
  std::string problem;
};

// Local rank k's control line, just after the header.
Control* ControlOf(SharedRegion& region, int k) {
  return reinterpret_cast<Control*>(static_cast<char*>(region.data()) + kLine +
                                    k * kLine);
}

// The local leader creates the segment and publishes "name token chunk" under
// segment_key (empty when it could not: the others then give up too).
absl::StatusOr<Segment> CreateSegment(store::Store& store,
                                      const std::string& segment_key,
                                      int local_size, size_t chunk,
                                      const std::string& who) {
  Segment segment;
  std::random_device random;
  const uint64_t token = (static_cast<uint64_t>(random()) << 32) ^ random();
  const std::string name = shm::UniqueRegionName();
  absl::StatusOr<std::unique_ptr<SharedRegion>> created =
      SharedRegion::Create(name, SegmentBytes(local_size, chunk));
  std::string published;  // Empty: none (the others fall back).
  if (created.ok()) {
    segment.region = std::move(*created);
    auto* header = static_cast<Header*>(segment.region->data());
    header->ranks = local_size;
    header->chunk_bytes = chunk;
    header->token = token;
    header->magic = kMagic;
    published = absl::StrCat(name, " ", token, " ", chunk);
  } else {
    segment.problem = std::string(created.status().message());
  }
  MUSTER_RETURN_IF_ERROR(Annotate(store.Set(segment_key, published),
                                  absl::StrCat(who, ": publishing")));
  return segment;
}

// A non-leader waits for the leader's segment, maps it, and checks that its
// header is the one the leader wrote.
absl::StatusOr<Segment> OpenSegment(store::Store& store,
                                    const std::string& segment_key,
                                    const Topology& topology, size_t chunk,
                                    const std::string& who,
                                    absl::Duration timeout) {
  const int local_size = static_cast<int>(topology.local.size());
  absl::StatusOr<std::string> published = store.Get(segment_key, timeout);
  if (!published.ok()) {
    return Annotate(published.status(),
                    absl::StrCat(who, ": waiting for rank ", topology.local[0],
                                 "'s shared-memory segment"));
  }
  Segment segment;
  std::vector<std::string> parts = absl::StrSplit(*published, ' ');
  uint64_t token = 0;
  uint64_t their_chunk = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &token) ||
      !absl::SimpleAtoi(parts[2], &their_chunk)) {
    segment.problem =
        absl::StrCat("rank ", topology.local[0], " could not create a segment");
    return segment;
  }
  absl::StatusOr<std::unique_ptr<SharedRegion>> opened =
      SharedRegion::Open(parts[0], SegmentBytes(local_size, their_chunk));
  if (!opened.ok()) {
    // E.g. another IPC namespace (a container) with the same host name
    // and boot id: its /dev/shm is not ours.
    segment.problem = std::string(opened.status().message());
    return segment;
  }
  const auto* header = static_cast<const Header*>((*opened)->data());
  if (header->magic != kMagic || header->token != token ||
      header->ranks != static_cast<uint64_t>(local_size) ||
      header->chunk_bytes != their_chunk) {
    segment.problem =
        absl::StrCat("shared memory ", parts[0], " is not the one rank ",
                     topology.local[0], " created (another /dev/shm?)");
    return segment;
  }
  segment.region = std::move(*opened);
  // Every rank must use the leader's chunk size.
  if (their_chunk != chunk) {
    MUSTER_LOG(DEBUG) << who << ": using rank " << topology.local[0]
                      << "'s chunk size " << their_chunk;
  }
  return segment;
}

// A local peer whose pid this rank cannot see (another pid namespace) would
// look dead: liveness checks only where every local pid is visible.
bool AllLocalPidsVisible(SharedRegion& region, int local_size) {
  for (int k = 0; k < local_size; ++k) {
    const Control* control = ControlOf(region, k);
    if (control->pid <= 0 || !shm::ProcessExists(control->pid)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> WithSharedMemory(
    const CoreConfig& config, std::unique_ptr<Backend> gloo,
    absl::Time deadline, const BackendConnector& connect_leaders) {
  const int n = config.world_size;
  const int rank = config.rank;
  if (n < 2) return gloo;
  const bool forced =
      config.options.allreduce_algorithm == AllReduceAlgorithm::kShm;
  if (const char* env = platform::NonEmptyEnv("MUSTER_SHM");
      env != nullptr && std::string(env) == "0") {
    if (forced) {
      MUSTER_LOG(WARNING) << "rank " << rank
                          << ": allreduce algorithm shm asked for, but "
                             "MUSTER_SHM=0: using Gloo";
    }
    return gloo;
  }
  const std::string who = absl::StrCat("rank ", rank, "/", n);
  store::Store& store = *config.store;
  const std::string root = absl::StrCat(config.key_prefix, "shm/");
  auto remaining = [&] {
    return std::max(deadline - absl::Now(), absl::Milliseconds(1));
  };
  auto rank_keys = [&](absl::string_view what) {
    std::vector<std::string> keys;
    for (int r = 0; r < n; ++r) keys.push_back(absl::StrCat(root, what, r));
    return keys;
  };

  // 1. Who is on which host.
  MUSTER_RETURN_IF_ERROR(
      Annotate(store.Set(absl::StrCat(root, "host/", rank), HostIdOf(config)),
               absl::StrCat(who, ": publishing its host for shared memory")));
  absl::StatusOr<std::vector<std::string>> hosts =
      store.MultiGet(rank_keys("host/"), remaining());
  if (!hosts.ok()) {
    return Annotate(hosts.status(),
                    absl::StrCat(who, ": finding the ranks on its host"));
  }
  Topology topology = MakeTopology(*hosts, rank);
  if (!topology.any_shared_host) {
    if (forced) {
      MUSTER_LOG(WARNING) << who
                          << ": allreduce algorithm shm asked for, but no "
                             "host runs two ranks: using Gloo";
    }
    return gloo;
  }
  const int local_size = static_cast<int>(topology.local.size());

  // 2. The segment: created by the local leader, mapped by the others.
  const size_t chunk = ChunkBytes(local_size);
  std::unique_ptr<SharedRegion> region;
  std::string problem;
  if (local_size > 1) {
    const std::string segment_key =
        absl::StrCat(root, "segment/", topology.host_index);
    absl::StatusOr<Segment> segment =
        topology.local_rank == 0
            ? CreateSegment(store, segment_key, local_size, chunk, who)
            : OpenSegment(store, segment_key, topology, chunk, who,
                          remaining());
    if (!segment.ok()) return segment.status();
    region = std::move(segment->region);
    problem = std::move(segment->problem);
    if (region != nullptr) {
      ControlOf(*region, topology.local_rank)->pid = shm::CurrentProcessId();
    }
  }

  // 3. Every rank (of every host) agrees: all mapped, or none uses it.
  MUSTER_RETURN_IF_ERROR(
      Annotate(store.Set(absl::StrCat(root, "ok/", rank),
                         problem.empty() ? std::string("1")
                                         : absl::StrCat("0 ", problem)),
               absl::StrCat(who, ": reporting its shared-memory segment")));
  absl::StatusOr<std::vector<std::string>> oks =
      store.MultiGet(rank_keys("ok/"), remaining());
  if (!oks.ok()) {
    return Annotate(oks.status(),
                    absl::StrCat(who, ": agreeing on shared memory"));
  }
  // Every local rank has mapped it (or given up): the name can go.
  if (region != nullptr && topology.local_rank == 0) region->Unlink();
  for (int r = 0; r < n; ++r) {
    if ((*oks)[r] == "1") continue;
    const std::string text = absl::StrCat(
        who, ": not using shared memory: rank ", r, ": ",
        absl::string_view((*oks)[r]).substr(
            std::min<size_t>(2, (*oks)[r].size())),
        "; collectives go through Gloo (TCP) alone (MUSTER_SHM=0 silences "
        "this)");
    if (rank == 0 || forced) {
      MUSTER_LOG(WARNING) << text;
    } else {
      MUSTER_LOG(DEBUG) << text;
    }
    return gloo;
  }
  size_t used_chunk = chunk;
  if (region != nullptr) {
    used_chunk = static_cast<const Header*>(region->data())->chunk_bytes;
  }
  // The peer monitor covers a lost peer where pids are not checked.
  const bool check_pids =
      region != nullptr && AllLocalPidsVisible(*region, local_size);

  // 4. Across hosts: one Gloo mesh between the hosts' leaders.
  std::unique_ptr<Backend> leaders;
  if (topology.num_hosts > 1 && topology.local_rank == 0) {
    CoreConfig across = config;
    across.rank = topology.host_index;
    across.world_size = topology.num_hosts;
    across.key_prefix = absl::StrCat(root, "leaders/");
    across.options.allreduce_algorithm = AllReduceAlgorithm::kAuto;
    absl::StatusOr<std::unique_ptr<Backend>> connected =
        connect_leaders(across, deadline);
    if (!connected.ok()) {
      return Annotate(connected.status(),
                      absl::StrCat(who, ": connecting the hosts' leaders"));
    }
    leaders = std::move(*connected);
  }
  MUSTER_LOG(DEBUG) << who << ": shared memory with " << local_size
                    << " local rank(s) on host " << topology.host_index
                    << " of " << topology.num_hosts << " (chunk " << used_chunk
                    << " bytes)";
  return std::unique_ptr<Backend>(
      new ShmBackend(config, std::move(topology), std::move(region), used_chunk,
                     check_pids, std::move(gloo), std::move(leaders)));
}

}  // namespace muster::comm::internal
