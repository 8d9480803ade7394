#include "comm/gloo/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/gloo/abortable_transport.h"
#include "comm/gloo/broken_pipe.h"
#include "comm/gloo/gloo_device.h"
#include "comm/gloo/gloo_mesh.h"
#include "comm/gloo/gloo_status.h"
#include "comm/gloo/gloo_store.h"
#include "comm/reduce/reduce.h"
#include "gloo/algorithm.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/gather.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/scatter.h"
#include "gloo/transport/buffer.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"
#include "muster/platform/env.h"

namespace muster::comm::internal {

// ---- Algorithm selection ----
//
// Measured with muster-bench on the reference machine (2 cores, loopback, 2,
// 3 and 4 ranks; docs/performance.md "Collectives" has the tables and the
// commands):
//   * 2 ranks: Gloo's AllreduceRing (one exchange of the whole message, kept
//     built between calls) is the fastest below 1 MB, by 2x over
//     halving-doubling and bcube for small messages (~75 us vs ~155 us: one
//     message per transfer, where the option-based algorithms first send a
//     ready-to-receive notice); from 1 MB the option-based ring (no per-call
//     buffers, two segments in flight) is fastest: 1.3-1.5x at 1 MB (three
//     runs of muster-bench --min=1M --max=1M), 1.2-1.6x at 2-8 MB.
//   * 3 and 4 ranks: halving-doubling (kept built) is as fast as the ring for
//     small messages and 1.3-1.4x faster from 128 KB; above 1 MB the
//     option-based bcube (recursive halving and doubling, any world size,
//     nothing to build per call) leads.
// Gloo's own AllreduceBcube is never chosen: it is wrong for world sizes that
// are not powers of two and races with itself when run again.
constexpr size_t kLargeMessageBytes = 1 << 20;

AllReduceAlgorithm ChooseAllReduceAlgorithm(size_t bytes, int world_size) {
  if (world_size <= 2) {
    return bytes < kLargeMessageBytes ? AllReduceAlgorithm::kRing
                                      : AllReduceAlgorithm::kRingUnbound;
  }
  return bytes <= kLargeMessageBytes ? AllReduceAlgorithm::kHalvingDoubling
                                     : AllReduceAlgorithm::kBcubeUnbound;
}

namespace {

// Slot prefix of Send/Recv: above Gloo's own (0x01..0x08), below nothing else.
constexpr uint8_t kP2PSlotPrefix = 0x40;
// Slot prefix of muster's ring reduce-scatter.
constexpr uint8_t kReduceScatterSlotPrefix = 0x41;

// Gloo's templated algorithms take a ReductionFunction<T>; one static
// instance per (T, op).
template <typename T>
const ::gloo::ReductionFunction<T>* LegacyFunction(ReduceOp op) {
  static const auto* sum = new ::gloo::ReductionFunction<T>(
      ::gloo::SUM, &InPlaceKernel<T, &Elem<T>::Add>);
  static const auto* product = new ::gloo::ReductionFunction<T>(
      ::gloo::PRODUCT, &InPlaceKernel<T, &Elem<T>::Multiply>);
  static const auto* min = new ::gloo::ReductionFunction<T>(
      ::gloo::MIN, &InPlaceKernel<T, &Elem<T>::Min>);
  static const auto* max = new ::gloo::ReductionFunction<T>(
      ::gloo::MAX, &InPlaceKernel<T, &Elem<T>::Max>);
  switch (op) {
    case ReduceOp::kProduct:
      return product;
    case ReduceOp::kMin:
      return min;
    case ReduceOp::kMax:
      return max;
    default:
      return sum;
  }
}

// Gloo's AllreduceRing exchanges through buffers of its own (inbox, outbox)
// and only copies from and reduces into the caller's buffer: pointing it at
// another buffer between runs is safe, so a cached ring needs no staging copy.
template <typename T>
class RebindableRing final : public ::gloo::AllreduceRing<T> {
 public:
  using ::gloo::AllreduceRing<T>::AllreduceRing;
  void Rebind(void* data) { this->ptrs_[0] = static_cast<T*>(data); }
};

// Allreduces up to this size run on the direct mesh (comm/direct/, on
// sockets libmuster_comm owns; 0: no such mesh), as long as the N-1 copies
// each rank sends stay within kDirectBudgetBytes. ConnectGloo's caller
// (comm/select/) connects it, so that this backend names no other.
//
// Why: one network step instead of Gloo's two or more, and a waiting thread
// that reads its own sockets instead of being woken by Gloo's event loop
// (Gloo's sync mode did the latter, but its blocking reads could not be
// aborted: see direct_allreduce.h). At most 128 KB by default.
// MUSTER_GLOO_SYNC_BYTES sets the limit (0 turns the mesh off); the name is
// kept from the Gloo sync-mode mesh this replaced.
constexpr size_t kDirectBudgetBytes = 1 << 20;

size_t DirectMaxBytes() {
  size_t limit = 128 << 10;
  if (const char* env = platform::NonEmptyEnv("MUSTER_GLOO_SYNC_BYTES")) {
    uint64_t value = 0;
    if (absl::SimpleAtoi(env, &value)) {
      limit = std::min<size_t>(value, limit);
    } else {
      MUSTER_LOG(WARNING) << "MUSTER_GLOO_SYNC_BYTES=" << env
                          << " is not a number of bytes; using " << limit;
    }
  }
  return limit;
}

class GlooP2P final : public PendingP2P {
 public:
  GlooP2P(std::unique_ptr<::gloo::transport::UnboundBuffer> buffer, bool send,
          std::vector<std::string> peers)
      : buffer_(std::move(buffer)), send_(send), peers_(std::move(peers)) {}

  absl::Status Wait(absl::Time deadline) override {
    if (buffer_ == nullptr) return absl::OkStatus();
    return CallGloo(GlooStage::kCollective, "gloo", peers_, [&] {
      if (send_) {
        buffer_->waitSend(Remaining(deadline));
      } else {
        buffer_->waitRecv(Remaining(deadline));
      }
    });
  }

 private:
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer_;
  const bool send_;
  const std::vector<std::string> peers_;
};

class GlooBackend final : public Backend {
 public:
  // `direct` (may be null: the direct mesh) runs allreduces of up to
  // `direct_max_bytes` when the algorithm is chosen automatically.
  GlooBackend(int rank, int world_size, AllReduceAlgorithm algorithm,
              GlooMesh mesh, std::unique_ptr<Backend> direct,
              size_t direct_max_bytes)
      : rank_(rank),
        world_size_(world_size),
        algorithm_(algorithm),
        peer_addresses_(std::move(mesh.peer_names)),
        context_(std::move(mesh.context)),
        transport_(std::move(mesh.transport)),
        sizer_(std::move(mesh.sizer)),
        direct_(std::move(direct)),
        direct_max_bytes_(direct_ != nullptr ? direct_max_bytes : 0) {}

  ~GlooBackend() override { Close(); }

  absl::string_view name() const override { return "gloo"; }

  absl::Status Run(const Op& op, absl::Time deadline) override {
    absl::Status status;
    absl::Status thrown =
        CallGloo(GlooStage::kCollective, "gloo", peer_addresses_,
                 [&] { status = Dispatch(op, deadline); });
    return thrown.ok() ? status : thrown;
  }

  absl::StatusOr<std::unique_ptr<PendingP2P>> Post(const Op& op) override {
    const size_t bytes = op.count * DataTypeSize(op.dtype);
    if (bytes == 0) {
      return std::unique_ptr<PendingP2P>(
          new GlooP2P(nullptr, op.kind == OpKind::kSend, {}));
    }
    std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
    const uint64_t slot = ::gloo::Slot::build(kP2PSlotPrefix, op.tag);
    MUSTER_RETURN_IF_ERROR(
        CallGloo(GlooStage::kCollective, "gloo", peer_addresses_, [&] {
          if (op.kind == OpKind::kSend) {
            buffer = context_->createUnboundBuffer(const_cast<void*>(op.input),
                                                   bytes);
            buffer->send(op.root, slot);
          } else {
            buffer = context_->createUnboundBuffer(op.output, bytes);
            buffer->recv(op.root, slot);
          }
        }));
    return std::unique_ptr<PendingP2P>(new GlooP2P(
        std::move(buffer), op.kind == OpKind::kSend, peer_addresses_));
  }

  // Fails every operation of both meshes, pending or later, through their
  // owners (AbortableTransport, the direct mesh): whatever waits throws or
  // returns at once (CommCore reports `why`, not Gloo's words), and the
  // peers read EOF, so they stop too instead of waiting for this rank.
  void Abort(const absl::Status& why) override {
    absl::MutexLock lock(&abort_mu_);
    if (aborted_ || context_ == nullptr) return;
    aborted_ = true;
    MUSTER_LOG(DEBUG) << "rank " << rank_ << ": aborting Gloo (" << why << ")";
    if (direct_ != nullptr) direct_->Abort(why);
    transport_->Abort();
  }

  void Close() override {
    absl::MutexLock lock(&abort_mu_);
    aborted_ = true;
    // The algorithms hold buffers registered with the pairs.
    big_.reset();
    cache_.clear();
    lru_.clear();
    retired_.clear();
    cached_bytes_ = 0;
    direct_.reset();
    sizer_.reset();
    context_.reset();  // Pairs close their sockets.
    transport_.reset();
  }

 private:
  char* Scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  uint32_t NextTag() { return tag_++; }

  absl::Status Dispatch(const Op& op, absl::Time deadline) {
    const size_t esize = DataTypeSize(op.dtype);
    const size_t bytes = op.count * esize;
    switch (op.kind) {
      case OpKind::kAllReduce:
        return AllReduce(op, bytes, deadline);
      case OpKind::kReduce:
        return Reduce(op, bytes, deadline);
      case OpKind::kBroadcast: {
        if (bytes == 0 || world_size_ == 1) return absl::OkStatus();
        ::gloo::BroadcastOptions opts(context_);
        opts.setOutput(static_cast<uint8_t*>(op.output), bytes);
        opts.setRoot(op.root);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::broadcast(opts);
        return absl::OkStatus();
      }
      case OpKind::kAllGather: {
        if (bytes == 0) return absl::OkStatus();
        char* out = static_cast<char*>(op.output);
        const bool in_place = op.input == out + rank_ * bytes;
        ::gloo::AllgatherOptions opts(context_);
        if (!in_place) {
          opts.setInput(
              const_cast<uint8_t*>(static_cast<const uint8_t*>(op.input)),
              bytes);
        }
        opts.setOutput(reinterpret_cast<uint8_t*>(out), bytes * world_size_);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::allgather(opts);
        return absl::OkStatus();
      }
      case OpKind::kAllGatherV: {
        std::vector<size_t> counts;
        size_t offset = 0;
        size_t total = 0;
        for (int r = 0; r < world_size_; ++r) {
          if (r == rank_) offset = total;
          counts.push_back(op.counts[r] * esize);
          total += op.counts[r] * esize;
        }
        if (total == 0) return absl::OkStatus();
        char* out = static_cast<char*>(op.output);
        if (world_size_ == 1) {
          if (op.input != out) std::memcpy(out, op.input, total);
          return absl::OkStatus();
        }
        ::gloo::AllgathervOptions opts(context_);
        if (op.input != out + offset) {
          opts.setInput(
              const_cast<uint8_t*>(static_cast<const uint8_t*>(op.input)),
              counts[rank_]);
        }
        opts.setOutput(reinterpret_cast<uint8_t*>(out), counts);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::allgatherv(opts);
        return absl::OkStatus();
      }
      case OpKind::kGather: {
        if (bytes == 0) return absl::OkStatus();
        const void* input = op.input;
        char* out = static_cast<char*>(op.output);
        if (rank_ == op.root && input == out + rank_ * bytes) {
          // Gloo copies the input into the root's slot with memcpy: give it a
          // copy rather than the same bytes.
          input = std::memcpy(Scratch(bytes), input, bytes);
        }
        ::gloo::GatherOptions opts(context_);
        opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(input)),
                      bytes);
        if (rank_ == op.root) {
          opts.setOutput(reinterpret_cast<uint8_t*>(out), bytes * world_size_);
        }
        opts.setRoot(op.root);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::gather(opts);
        return absl::OkStatus();
      }
      case OpKind::kScatter: {
        if (bytes == 0) return absl::OkStatus();
        ::gloo::ScatterOptions opts(context_);
        if (rank_ == op.root) {
          const char* in = static_cast<const char*>(op.input);
          std::vector<uint8_t*> blocks;
          for (int r = 0; r < world_size_; ++r) {
            const char* block = in + r * bytes;
            if (r == rank_ && block == op.output) {
              block = static_cast<const char*>(
                  std::memcpy(Scratch(bytes), block, bytes));
            }
            blocks.push_back(
                reinterpret_cast<uint8_t*>(const_cast<char*>(block)));
          }
          opts.setInputs(blocks, bytes);
        }
        opts.setOutput(static_cast<uint8_t*>(op.output), bytes);
        opts.setRoot(op.root);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::scatter(opts);
        return absl::OkStatus();
      }
      case OpKind::kReduceScatter:
        return ReduceScatter(op, bytes, deadline);
      case OpKind::kAllToAll: {
        if (bytes == 0) return absl::OkStatus();
        if (world_size_ == 1) {
          std::memcpy(op.output, op.input, bytes);
          return absl::OkStatus();
        }
        ::gloo::AlltoallOptions opts(context_);
        opts.setInput(
            const_cast<uint8_t*>(static_cast<const uint8_t*>(op.input)),
            bytes * world_size_);
        opts.setOutput(static_cast<uint8_t*>(op.output), bytes * world_size_);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::alltoall(opts);
        return absl::OkStatus();
      }
      case OpKind::kBarrier: {
        if (world_size_ == 1) return absl::OkStatus();
        ::gloo::BarrierOptions opts(context_);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::barrier(opts);
        return absl::OkStatus();
      }
      case OpKind::kSend:
      case OpKind::kRecv:
        break;
    }
    return absl::InternalError(
        absl::StrCat("gloo backend: unexpected ", OpName(op.kind)));
  }

  absl::Status AllReduce(const Op& op, size_t bytes, absl::Time deadline) {
    if (bytes == 0) return absl::OkStatus();
    // direct_max_bytes_ is 0 without a direct mesh, and there is none for one
    // rank. The direct mesh copies, reduces and averages as below.
    if (algorithm_ == AllReduceAlgorithm::kAuto && bytes <= direct_max_bytes_ &&
        bytes * (world_size_ - 1) <= kDirectBudgetBytes) {
      return direct_->Run(op, deadline);
    }
    if (op.input != op.output) std::memcpy(op.output, op.input, bytes);
    if (world_size_ == 1) return absl::OkStatus();
    const AllReduceAlgorithm algorithm =
        algorithm_ != AllReduceAlgorithm::kAuto
            ? algorithm_
            : ChooseAllReduceAlgorithm(bytes, world_size_);
    MUSTER_RETURN_IF_ERROR(RunAllReduce(algorithm, op.output, op.count,
                                        op.dtype, op.op, deadline));
    if (op.op == ReduceOp::kAvg) {
      DivideInPlace(op.output, op.count, op.dtype, world_size_);
    }
    return absl::OkStatus();
  }

  // In place on `data`; kAvg sums (the caller divides).
  absl::Status RunAllReduce(AllReduceAlgorithm algorithm, void* data,
                            size_t count, DataType dtype, ReduceOp op,
                            absl::Time deadline) {
    // Gloo's AllreduceBcube is wrong unless the world size is a power of two
    // (with N = 3 most elements come out wrong), and it races with itself
    // when run again (an instance run 300 times on 4 ranks returned wrong
    // sums twice): muster builds it for each call, and uses the option-based
    // bcube for other world sizes.
    const bool power_of_two = (world_size_ & (world_size_ - 1)) == 0;
    if (algorithm == AllReduceAlgorithm::kBcube && !power_of_two) {
      algorithm = AllReduceAlgorithm::kBcubeUnbound;
    }
    // Without bound buffers (Gloo's libuv transport, Windows) only the
    // option-based algorithms run: the ring for the ring family, bcube for
    // the recursive ones.
    if (!GlooHasBoundBuffers()) {
      algorithm = algorithm == AllReduceAlgorithm::kRing ||
                          algorithm == AllReduceAlgorithm::kRingChunked ||
                          algorithm == AllReduceAlgorithm::kRingUnbound
                      ? AllReduceAlgorithm::kRingUnbound
                      : AllReduceAlgorithm::kBcubeUnbound;
    }
    if (algorithm == AllReduceAlgorithm::kRingUnbound ||
        algorithm == AllReduceAlgorithm::kBcubeUnbound) {
      MUSTER_ASSIGN_OR_RETURN(ReduceFn fn, ReduceFunction(dtype, op));
      ::gloo::AllreduceOptions opts(context_);
      return VisitDataType(dtype, [&](auto zero) {
        using T = decltype(zero);
        opts.setOutput(static_cast<T*>(data), count);
        opts.setReduceFunction(fn);
        opts.setAlgorithm(algorithm == AllReduceAlgorithm::kRingUnbound
                              ? ::gloo::AllreduceOptions::Algorithm::RING
                              : ::gloo::AllreduceOptions::Algorithm::BCUBE);
        opts.setTag(NextTag());
        opts.setTimeout(Remaining(deadline));
        ::gloo::allreduce(opts);
        return absl::OkStatus();
      });
    }
    if (count > static_cast<size_t>(std::numeric_limits<int>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gloo's ", AllReduceAlgorithmName(algorithm),
          " takes at most 2^31-1 elements; use ring_unbound for more"));
    }
    // The algorithm classes send from bound buffers, which set the pairs'
    // send buffer sizes: at the maximum first (gloo_mesh.cc).
    if (sizer_ != nullptr) sizer_->SizeOnce(*context_);
    const size_t bytes = count * DataTypeSize(dtype);
    const std::shared_ptr<PeerContext>& context = context_;
    if (bytes <= kCacheMaxBytes && ranges_ > kCacheEntries + kRetired &&
        algorithm != AllReduceAlgorithm::kBcube) {
      MUSTER_ASSIGN_OR_RETURN(CacheEntry * entry,
                              Cached(context, algorithm, count, dtype, op));
      if (entry->rebind) {
        entry->rebind(data);
        entry->algo->run();
        return absl::OkStatus();
      }
      std::memcpy(entry->staging.data(), data, bytes);
      entry->algo->run();
      std::memcpy(data, entry->staging.data(), bytes);
      return absl::OkStatus();
    }
    // A large message (or bcube): built for this call, on the caller's
    // buffer. It is kept until the next one is built (see below).
    big_.reset();
    MUSTER_ASSIGN_OR_RETURN(
        big_, BuildAt(context, NextRange(), algorithm, data, count, dtype, op));
    big_->run();
    return absl::OkStatus();
  }

 private:
  // ---- Gloo's algorithm classes, kept between calls ----
  //
  // Building one registers buffers with the pairs and takes slots from the
  // context. Gloo's own benchmark builds once and runs many times; so does
  // libmuster_comm for messages up to kCacheMaxBytes: it keeps the last
  // kCacheEntries algorithms, keyed by shape (algorithm, dtype, op, count),
  // each built on a staging buffer of its own (the caller's data is copied in
  // and out: a few microseconds at most at these sizes). Keys leave the
  // caller's address out, and every rank sees the same sequence of shapes, so
  // every rank hits, misses and evicts alike and builds on the same slots
  // (each build takes the next range of slots, never one still registered).
  //
  // An algorithm's last message (a notification) may still be leaving when
  // run() returns; destroying it then would free a buffer the transport still
  // writes from. Evicted algorithms therefore retire first and are destroyed
  // kRetired evictions later (or at Close); a large message's algorithm lives
  // until the next large one is built.
  struct ShapeKey {
    AllReduceAlgorithm algorithm;
    DataType dtype;
    ReduceOp op;
    size_t count;
    bool operator<(const ShapeKey& o) const {
      return std::tie(algorithm, dtype, op, count) <
             std::tie(o.algorithm, o.dtype, o.op, o.count);
    }
  };
  struct CacheEntry {
    std::vector<char> staging;
    std::unique_ptr<::gloo::Algorithm> algo;
    // Set for algorithms that can be pointed at the caller's buffer (the
    // ring); the others run on `staging`.
    std::function<void(void*)> rebind;
    size_t bytes = 0;  // The message size (for the cache's budget).
    std::list<ShapeKey>::iterator lru;
  };
  // Up to 1 MB per message and kCacheBudget bytes of messages in all (each
  // algorithm holds about 3 copies: staging, inbox, outbox).
  static constexpr size_t kCacheMaxBytes = 1 << 20;
  static constexpr size_t kCacheBudget = 16 << 20;
  static constexpr int64_t kCacheEntries = 32;
  static constexpr int64_t kRetired = 32;
  // Slots below this are Gloo's own (connectFullMesh takes a few); the
  // option-based collectives use 64-bit slots above 2^56.
  static constexpr int64_t kSlotBase = 1 << 16;

  // Slots one algorithm may take: 2 N (N - 1) for halving-doubling and bcube,
  // a few for the rings.
  int64_t SlotStride() const {
    return 2 * static_cast<int64_t>(world_size_) * (world_size_ - 1) + 8;
  }

  int64_t NextRange() { return next_range_++ % ranges_; }

  absl::StatusOr<CacheEntry*> Cached(
      const std::shared_ptr<PeerContext>& context, AllReduceAlgorithm algorithm,
      size_t count, DataType dtype, ReduceOp op) {
    const ShapeKey key{algorithm, dtype, op, count};
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return &it->second;
    }
    const size_t bytes = count * DataTypeSize(dtype);
    while (!cache_.empty() &&
           (cache_.size() >= static_cast<size_t>(kCacheEntries) ||
            cached_bytes_ + bytes > kCacheBudget)) {
      auto victim = cache_.find(lru_.back());
      cached_bytes_ -= victim->second.bytes;
      retired_.push_back(std::move(victim->second));
      cache_.erase(victim);
      lru_.pop_back();
      // Retired algorithms hold memory too: keep few of the large ones.
      while (retired_.size() > static_cast<size_t>(kRetired) ||
             (retired_.size() > 1 && retired_.front().bytes > (64 << 10))) {
        retired_.pop_front();
      }
    }
    cached_bytes_ += bytes;
    CacheEntry entry;
    entry.bytes = bytes;
    entry.staging.resize(std::max<size_t>(count * DataTypeSize(dtype), 1));
    MUSTER_ASSIGN_OR_RETURN(entry.algo,
                            BuildAt(context, NextRange(), algorithm,
                                    entry.staging.data(), count, dtype, op));
    if (algorithm == AllReduceAlgorithm::kRing) {
      ::gloo::Algorithm* algo = entry.algo.get();
      (void)VisitDataType(dtype, [&](auto zero) {
        using T = decltype(zero);
        entry.rebind = [algo](void* data) {
          static_cast<RebindableRing<T>*>(algo)->Rebind(data);
        };
        return absl::OkStatus();
      });
      entry.staging.clear();  // Not needed.
      entry.staging.shrink_to_fit();
    }
    lru_.push_front(key);
    entry.lru = lru_.begin();
    return &cache_.emplace(key, std::move(entry)).first->second;
  }

  // Builds on slot range `range`, leaving the context's own counter as it was.
  absl::StatusOr<std::unique_ptr<::gloo::Algorithm>> BuildAt(
      const std::shared_ptr<PeerContext>& context, int64_t range,
      AllReduceAlgorithm algorithm, void* data, size_t count, DataType dtype,
      ReduceOp op) {
    const int saved = context->slot();
    context->set_slot(static_cast<int>(kSlotBase + range * SlotStride()));
    auto built = Build(context, algorithm, data, count, dtype, op);
    context->set_slot(saved);
    return built;
  }

  absl::StatusOr<std::unique_ptr<::gloo::Algorithm>> Build(
      const std::shared_ptr<PeerContext>& context, AllReduceAlgorithm algorithm,
      void* data, size_t count, DataType dtype, ReduceOp op) {
    std::unique_ptr<::gloo::Algorithm> result;
    MUSTER_RETURN_IF_ERROR(VisitDataType(dtype, [&](auto zero) {
      using T = decltype(zero);
      const std::vector<T*> ptrs = {static_cast<T*>(data)};
      const ::gloo::ReductionFunction<T>* fn = LegacyFunction<T>(op);
      const int n = static_cast<int>(count);
      switch (algorithm) {
        case AllReduceAlgorithm::kRingChunked:
          result = std::make_unique<::gloo::AllreduceRingChunked<T>>(
              context, ptrs, n, fn);
          break;
        case AllReduceAlgorithm::kHalvingDoubling:
          result = std::make_unique<::gloo::AllreduceHalvingDoubling<T>>(
              context, ptrs, n, fn);
          break;
        case AllReduceAlgorithm::kBcube:
          result =
              std::make_unique<::gloo::AllreduceBcube<T>>(context, ptrs, n, fn);
          break;
        default:
          result = std::make_unique<RebindableRing<T>>(context, ptrs, n, fn);
          break;
      }
      return absl::OkStatus();
    }));
    return result;
  }

  absl::Status Reduce(const Op& op, size_t bytes, absl::Time deadline) {
    if (bytes == 0) return absl::OkStatus();
    const bool root = rank_ == op.root;
    if (world_size_ == 1) {
      if (op.input != op.output) std::memcpy(op.output, op.input, bytes);
      return absl::OkStatus();
    }
    // Gloo accumulates in the output on every rank: elsewhere than the root
    // that is scratch, so the caller's buffers stay untouched.
    void* out = root ? op.output : Scratch(bytes);
    MUSTER_ASSIGN_OR_RETURN(ReduceFn fn, ReduceFunction(op.dtype, op.op));
    ::gloo::ReduceOptions opts(context_);
    return VisitDataType(op.dtype, [&](auto zero) {
      using T = decltype(zero);
      if (op.input != out) {
        opts.setInput(const_cast<T*>(static_cast<const T*>(op.input)),
                      op.count);
      }
      opts.setOutput(static_cast<T*>(out), op.count);
      opts.setRoot(op.root);
      opts.setReduceFunction(fn);
      opts.setTag(NextTag());
      opts.setTimeout(Remaining(deadline));
      ::gloo::reduce(opts);
      if (root && op.op == ReduceOp::kAvg) {
        DivideInPlace(op.output, op.count, op.dtype, world_size_);
      }
      return absl::OkStatus();
    });
  }

  // A ring: in step s (0 <= s < N-1) rank r sends the partial sum of block
  // (r - s - 1) mod N to rank r+1 and receives block (r - s - 2) mod N from
  // rank r-1, adds its own input block to it, and sends that on in the next
  // step. After N-1 steps rank r holds the full reduction of block r. Each
  // rank moves (N-1)/N of the data, as NCCL's ring does.
  absl::Status ReduceScatter(const Op& op, size_t bytes, absl::Time deadline) {
    if (bytes == 0) return absl::OkStatus();
    const int n = world_size_;
    const char* in = static_cast<const char*>(op.input);
    if (n == 1) {
      if (op.input != op.output) std::memcpy(op.output, in, bytes);
      if (op.op == ReduceOp::kAvg) {
        DivideInPlace(op.output, op.count, op.dtype, n);
      }
      return absl::OkStatus();
    }
    MUSTER_ASSIGN_OR_RETURN(ReduceFn fn, ReduceFunction(op.dtype, op.op));
    const int right = (rank_ + 1) % n;
    const int left = (rank_ + n - 1) % n;
    auto block = [&](int b) { return in + ((b % n + n) % n) * bytes; };
    char* buf = Scratch(2 * bytes);
    char* bufs[2] = {buf, buf + bytes};
    const uint64_t slot =
        ::gloo::Slot::build(kReduceScatterSlotPrefix, NextTag());
    auto send_in = context_->createUnboundBuffer(
        const_cast<char*>(block(rank_ - 1)), bytes);
    std::unique_ptr<::gloo::transport::UnboundBuffer> ubufs[2] = {
        context_->createUnboundBuffer(bufs[0], bytes),
        context_->createUnboundBuffer(bufs[1], bytes)};
    for (int s = 0; s < n - 1; ++s) {
      ::gloo::transport::UnboundBuffer* send =
          s == 0 ? send_in.get() : ubufs[(s - 1) % 2].get();
      ::gloo::transport::UnboundBuffer* recv = ubufs[s % 2].get();
      send->send(right, slot);
      recv->recv(left, slot);
      recv->waitRecv(Remaining(deadline));
      send->waitSend(Remaining(deadline));
      const int b = rank_ - s - 2;
      char* dst = s == n - 2 ? static_cast<char*>(op.output) : bufs[s % 2];
      fn(dst, bufs[s % 2], block(b), op.count);
    }
    if (op.op == ReduceOp::kAvg) {
      DivideInPlace(op.output, op.count, op.dtype, n);
    }
    return absl::OkStatus();
  }

  const int rank_;
  const int world_size_;
  const AllReduceAlgorithm algorithm_;
  const std::vector<std::string> peer_addresses_;
  std::shared_ptr<PeerContext> context_;
  std::shared_ptr<AbortableTransport> transport_;  // context_'s.
  // Sizes the send buffers before the first algorithm class runs; null
  // where Gloo has no bound buffers.
  std::unique_ptr<SendBufferSizer> sizer_;
  std::unique_ptr<Backend> direct_;  // The direct mesh; may be null.
  const size_t direct_max_bytes_;
  std::vector<char> scratch_;
  uint32_t tag_ = 0;
  std::map<ShapeKey, CacheEntry> cache_;
  std::list<ShapeKey> lru_;  // Most recently used first.
  std::deque<CacheEntry> retired_;
  size_t cached_bytes_ = 0;  // Staging bytes of the cached algorithms.
  std::unique_ptr<::gloo::Algorithm> big_;
  // Slot ranges that fit in Gloo's int slots; the next one to use.
  const int64_t ranges_ =
      (std::numeric_limits<int>::max() - kSlotBase) / SlotStride() - 1;
  int64_t next_range_ = 0;

  absl::Mutex abort_mu_;
  bool aborted_ ABSL_GUARDED_BY(abort_mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> ConnectGloo(
    const CoreConfig& config, absl::Time deadline,
    const BackendConnector& connect_direct) {
  const std::string who =
      absl::StrCat("rank ", config.rank, "/", config.world_size);
  IgnoreBrokenPipeUnlessHandled();
  const std::string where =
      config.iface.empty()
          ? absl::StrCat("address ", config.hostname)
          : absl::StrCat("interface ", config.iface, " (", config.bind_ip, ")");
  std::shared_ptr<::gloo::transport::Device> device;
  MUSTER_RETURN_IF_ERROR(
      CallGloo(GlooStage::kDevice,
               absl::StrCat(who, ": creating Gloo's ", GlooTransportName(),
                            " device on ", where),
               {}, [&] { device = NewGlooDevice(config); }));
  MUSTER_LOG(DEBUG) << who << ": Gloo binds " << where << " ("
                    << config.bind_reason << "): " << device->str();

  const size_t pin_bytes = SendBufferPinBytes();  // Read once: a /proc file.
  MUSTER_ASSIGN_OR_RETURN(
      GlooMesh mesh,
      ConnectMesh(config, device, config.key_prefix, "connecting to its peers",
                  pin_bytes, deadline));
  const size_t direct_max_bytes = DirectMaxBytes();
  std::unique_ptr<Backend> direct;
  if (direct_max_bytes > 0 && config.world_size > 1) {
    MUSTER_ASSIGN_OR_RETURN(direct, connect_direct(config, deadline));
  }
  return std::unique_ptr<Backend>(new GlooBackend(
      config.rank, config.world_size, config.options.allreduce_algorithm,
      std::move(mesh), std::move(direct), direct_max_bytes));
}

}  // namespace muster::comm::internal
