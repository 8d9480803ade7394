#include "comm/nccl/nccl_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"
#include "muster/platform/env.h"

#ifdef MUSTER_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/nccl/nccl_status.h"
#endif

namespace muster::comm::internal {

absl::StatusOr<bool> AgreeOnNccl(store::Store& store,
                                 const std::string& key_prefix, int rank,
                                 int world_size, bool usable,
                                 absl::Time deadline) {
  if (world_size == 1) return usable;
  auto left = [&] {
    return std::max(deadline - absl::Now(), absl::Milliseconds(1));
  };
  MUSTER_RETURN_IF_ERROR(store.Set(
      absl::StrCat(key_prefix, "nccl_usable/", rank), usable ? "1" : "0"));
  const std::string decision_key = absl::StrCat(key_prefix, "nccl_decision");
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world_size; ++r) {
      keys.push_back(absl::StrCat(key_prefix, "nccl_usable/", r));
    }
    MUSTER_ASSIGN_OR_RETURN(std::vector<std::string> values,
                            store.MultiGet(keys, left()));
    bool all = true;
    for (const std::string& v : values) all = all && v == "1";
    MUSTER_RETURN_IF_ERROR(store.Set(decision_key, all ? "1" : "0"));
    return all;
  }
  absl::StatusOr<std::string> decision = store.Get(decision_key, left());
  if (!decision.ok()) return decision.status();
  return *decision == "1";
}

#ifndef MUSTER_WITH_NCCL

bool NcclUsable(std::string* why_not) {
  if (why_not != nullptr) {
    *why_not =
        "this build of libmuster_comm has no NCCL (CMake did not find CUDA "
        "and NCCL under /usr/local/cuda)";
  }
  return false;
}

bool IsDevicePointer(const void*) { return false; }

absl::StatusOr<std::unique_ptr<Backend>> ConnectNccl(const CoreConfig&,
                                                     absl::Time) {
  std::string why;
  NcclUsable(&why);
  return absl::FailedPreconditionError(
      absl::StrCat("the NCCL backend cannot run: ", why));
}

#else  // MUSTER_WITH_NCCL

namespace {

struct GpuProbe {
  bool usable = false;
  int devices = 0;
  std::string why_not;
};

const GpuProbe& Probe() {
  static const GpuProbe* probe = [] {
    auto* p = new GpuProbe();
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      p->why_not = std::string(
          StatusFromCuda(err, "cudaGetDeviceCount failed").message());
      (void)cudaGetLastError();  // Clear the sticky error.
    } else if (count == 0) {
      p->why_not = "CUDA sees no device (cudaGetDeviceCount returned 0)";
    } else {
      p->usable = true;
      p->devices = count;
    }
    return p;
  }();
  return *probe;
}

absl::StatusOr<ncclDataType_t> NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
  }
  return absl::InvalidArgumentError("unknown DataType");
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

// Polls until `done` says so, NCCL reports an asynchronous error, the
// deadline passes (then aborts the communicator), or `aborted` is set.
template <typename Done>
absl::Status PollUntil(ncclComm_t comm, absl::Time deadline,
                       const std::atomic<bool>& aborted, Done&& done,
                       absl::string_view what) {
  absl::Duration sleep = absl::Microseconds(2);
  while (true) {
    MUSTER_ASSIGN_OR_RETURN(bool finished, done());
    if (finished) return absl::OkStatus();
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) return StatusFromNccl(r, what, comm);
    if (async != ncclSuccess && async != ncclInProgress) {
      return StatusFromNccl(async, what, comm);
    }
    if (aborted.load()) {
      return absl::AbortedError(absl::StrCat(what, ": aborted"));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": did not complete in time"));
    }
    absl::SleepFor(sleep);
    sleep = std::min(sleep * 2, absl::Milliseconds(1));
  }
}

class NcclBackend;

class NcclP2P final : public PendingP2P {
 public:
  NcclP2P(NcclBackend* backend, cudaEvent_t event)
      : backend_(backend), event_(event) {}
  ~NcclP2P() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  absl::Status Wait(absl::Time deadline) override;

 private:
  NcclBackend* const backend_;
  cudaEvent_t event_;
};

// Whether the NCCL library this process runs (not only the headers it was
// built with) has ncclCommShrink: 2.27 and later.
bool LibraryCanShrink() {
#if NCCL_VERSION_CODE >= 22700
  static const bool can = [] {
    int version = 0;
    return ncclGetVersion(&version) == ncclSuccess && version >= 22700;
  }();
  return can;
#else
  return false;
#endif
}

// Polls a non-blocking communicator's initialisation (init, shrink) until it
// is done or `deadline`.
absl::Status WaitForInit(ncclComm_t comm, absl::Time deadline,
                         absl::string_view what) {
  std::atomic<bool> never{false};
  return PollUntil(
      comm, deadline, never,
      [&]() -> absl::StatusOr<bool> {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm, &async);
        return async != ncclInProgress;
      },
      what);
}

class NcclBackend final : public Backend {
 public:
  // `keep_for_shrink`: Abort leaves the communicator for Shrink (under the
  // control channel, where Recover may shrink it).
  NcclBackend(int rank, int world_size, int device, ncclComm_t comm,
              cudaStream_t stream, void* scratch, bool keep_for_shrink)
      : rank_(rank),
        world_size_(world_size),
        device_(device),
        keep_for_shrink_(keep_for_shrink && LibraryCanShrink()),
        comm_(comm),
        stream_(stream),
        scratch_(scratch) {}

  ~NcclBackend() override { Close(); }

  absl::string_view name() const override { return "nccl"; }

  absl::Status Run(const Op& op, absl::Time deadline) override {
    MUSTER_RETURN_IF_ERROR(Enqueue(op));
    return Synchronize(deadline, "nccl");
  }

  absl::StatusOr<std::unique_ptr<PendingP2P>> Post(const Op& op) override {
    MUSTER_RETURN_IF_ERROR(Enqueue(op));
    cudaEvent_t event = nullptr;
    MUSTER_RETURN_IF_ERROR(
        StatusFromCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                       "cudaEventCreate"));
    absl::Status recorded =
        StatusFromCuda(cudaEventRecord(event, stream_), "cudaEventRecord");
    if (!recorded.ok()) {
      cudaEventDestroy(event);
      return recorded;
    }
    return std::unique_ptr<PendingP2P>(new NcclP2P(this, event));
  }

  void Abort(const absl::Status& why) override {
    if (aborted_.exchange(true)) return;
    MUSTER_LOG(DEBUG) << "nccl: aborting the communicator: " << why;
    // The poll loops see aborted_ and return. Kept for Shrink, the
    // communicator stays: ncclCommShrink(NCCL_SHRINK_ABORT) ends what is in
    // flight. Otherwise ncclCommAbort, the one call NCCL allows while others
    // are blocked in the communicator.
    if (keep_for_shrink_) return;
    absl::MutexLock lock(&mu_);
    if (comm_ != nullptr) {
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  absl::StatusOr<std::unique_ptr<Backend>> Shrink(
      const std::vector<int>& excluded, int rank, int world_size,
      absl::Time deadline) override {
#if NCCL_VERSION_CODE >= 22700
    if (!keep_for_shrink_) {
      return absl::UnimplementedError(
          "nccl: this communicator was aborted (the library predates "
          "ncclCommShrink, 2.27)");
    }
    const std::string what =
        absl::StrCat("rank ", rank, "/", world_size, ": ncclCommShrink");
    ncclComm_t shrunk = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) return absl::UnimplementedError("nccl: closed");
      MUSTER_RETURN_IF_ERROR(
          StatusFromCuda(cudaSetDevice(device_), "cudaSetDevice"));
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      std::vector<int> list = excluded;
      const ncclResult_t r =
          ncclCommShrink(comm_, list.data(), static_cast<int>(list.size()),
                         &shrunk, &config, NCCL_SHRINK_ABORT);
      if (r != ncclSuccess && r != ncclInProgress) {
        return StatusFromNccl(r, what, comm_);
      }
    }
    absl::Status ready = WaitForInit(shrunk, deadline, what);
    if (!ready.ok()) {
      if (shrunk != nullptr) ncclCommAbort(shrunk);
      return ready;
    }
    // The new communicator takes the stream and the scratch buffer; the old
    // one goes.
    std::unique_ptr<Backend> result(new NcclBackend(
        rank, world_size, device_, shrunk, stream_, scratch_, true));
    absl::MutexLock lock(&mu_);
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    stream_ = nullptr;
    scratch_ = nullptr;
    return result;
#else
    (void)excluded;
    (void)rank;
    (void)world_size;
    (void)deadline;
    return absl::UnimplementedError(
        "nccl: built against NCCL before 2.27 (no ncclCommShrink)");
#endif
  }

  void Close() override {
    absl::MutexLock lock(&mu_);
    if (comm_ != nullptr) {
      // An aborted communicator kept for Shrink is aborted, not destroyed
      // (its operations may never finish).
      (void)(aborted_.load() ? ncclCommAbort(comm_) : ncclCommDestroy(comm_));
      comm_ = nullptr;
    }
    if (stream_ != nullptr) {
      cudaStreamDestroy(stream_);
      stream_ = nullptr;
    }
    if (scratch_ != nullptr) {
      cudaFree(scratch_);
      scratch_ = nullptr;
    }
  }

  absl::Status WaitEvent(cudaEvent_t event, absl::Time deadline) {
    ncclComm_t comm = Comm();
    if (comm == nullptr) return absl::AbortedError("nccl: aborted");
    return PollUntil(
        comm, deadline, aborted_,
        [&]() -> absl::StatusOr<bool> {
          const cudaError_t e = cudaEventQuery(event);
          if (e == cudaSuccess) return true;
          if (e == cudaErrorNotReady) return false;
          return StatusFromCuda(e, "cudaEventQuery");
        },
        "nccl");
  }

 private:
  ncclComm_t Comm() {
    absl::MutexLock lock(&mu_);
    return comm_;
  }

  // Issues op's NCCL calls on the stream (under the lock: NCCL communicators
  // take one caller at a time).
  absl::Status Enqueue(const Op& op) {
    MUSTER_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(op.dtype));
    const size_t esize = DataTypeSize(op.dtype);
    const size_t bytes = op.count * esize;
    absl::MutexLock lock(&mu_);
    if (comm_ == nullptr) return absl::AbortedError("nccl: aborted");
    MUSTER_RETURN_IF_ERROR(
        StatusFromCuda(cudaSetDevice(device_), "cudaSetDevice"));
    const char* in = static_cast<const char*>(op.input);
    char* out = static_cast<char*>(op.output);
    auto check = [&](ncclResult_t r) {
      // Non-blocking communicators may answer ncclInProgress: the call is
      // queued, and the poll loop waits for it.
      return r == ncclInProgress ? absl::OkStatus()
                                 : StatusFromNccl(r, "nccl", comm_);
    };
    auto group = [&](auto&& body) -> absl::Status {
      MUSTER_RETURN_IF_ERROR(check(ncclGroupStart()));
      absl::Status s = body();
      absl::Status end = check(ncclGroupEnd());
      return s.ok() ? end : s;
    };
    switch (op.kind) {
      case OpKind::kAllReduce:
        return check(ncclAllReduce(in, out, op.count, type, NcclOp(op.op),
                                   comm_, stream_));
      case OpKind::kReduce:
        return check(ncclReduce(in, rank_ == op.root ? out : nullptr, op.count,
                                type, NcclOp(op.op), op.root, comm_, stream_));
      case OpKind::kBroadcast:
        return check(
            ncclBroadcast(out, out, op.count, type, op.root, comm_, stream_));
      case OpKind::kAllGather:
        return check(ncclAllGather(in, out, op.count, type, comm_, stream_));
      case OpKind::kReduceScatter:
        return check(ncclReduceScatter(in, out, op.count, type, NcclOp(op.op),
                                       comm_, stream_));
      case OpKind::kAllGatherV:
        return group([&]() -> absl::Status {
          size_t offset = 0;
          for (int r = 0; r < world_size_; ++r) {
            const size_t n = op.counts[r];
            char* slot = out + offset * esize;
            MUSTER_RETURN_IF_ERROR(check(ncclBroadcast(
                r == rank_ ? in : slot, slot, n, type, r, comm_, stream_)));
            offset += n;
          }
          return absl::OkStatus();
        });
      case OpKind::kGather:
        return group([&]() -> absl::Status {
          if (rank_ != op.root) {
            return check(ncclSend(in, op.count, type, op.root, comm_, stream_));
          }
          for (int r = 0; r < world_size_; ++r) {
            char* slot = out + r * bytes;
            if (r == rank_) {
              if (slot != in) {
                MUSTER_RETURN_IF_ERROR(StatusFromCuda(
                    cudaMemcpyAsync(slot, in, bytes, cudaMemcpyDeviceToDevice,
                                    stream_),
                    "cudaMemcpyAsync"));
              }
              continue;
            }
            MUSTER_RETURN_IF_ERROR(
                check(ncclRecv(slot, op.count, type, r, comm_, stream_)));
          }
          return absl::OkStatus();
        });
      case OpKind::kScatter:
        return group([&]() -> absl::Status {
          if (rank_ != op.root) {
            return check(
                ncclRecv(out, op.count, type, op.root, comm_, stream_));
          }
          for (int r = 0; r < world_size_; ++r) {
            const char* block = in + r * bytes;
            if (r == rank_) {
              if (block != out) {
                MUSTER_RETURN_IF_ERROR(StatusFromCuda(
                    cudaMemcpyAsync(out, block, bytes, cudaMemcpyDeviceToDevice,
                                    stream_),
                    "cudaMemcpyAsync"));
              }
              continue;
            }
            MUSTER_RETURN_IF_ERROR(
                check(ncclSend(block, op.count, type, r, comm_, stream_)));
          }
          return absl::OkStatus();
        });
      case OpKind::kAllToAll:
        return group([&]() -> absl::Status {
          for (int r = 0; r < world_size_; ++r) {
            MUSTER_RETURN_IF_ERROR(check(
                ncclSend(in + r * bytes, op.count, type, r, comm_, stream_)));
            MUSTER_RETURN_IF_ERROR(check(
                ncclRecv(out + r * bytes, op.count, type, r, comm_, stream_)));
          }
          return absl::OkStatus();
        });
      case OpKind::kBarrier:
        return check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum,
                                   comm_, stream_));
      case OpKind::kSend:
        return check(ncclSend(in, op.count, type, op.root, comm_, stream_));
      case OpKind::kRecv:
        return check(ncclRecv(out, op.count, type, op.root, comm_, stream_));
    }
    return absl::InternalError("nccl: unknown operation");
  }

  absl::Status Synchronize(absl::Time deadline, absl::string_view what) {
    ncclComm_t comm = Comm();
    if (comm == nullptr) return absl::AbortedError("nccl: aborted");
    absl::Status s = PollUntil(
        comm, deadline, aborted_,
        [&]() -> absl::StatusOr<bool> {
          const cudaError_t e = cudaStreamQuery(stream_);
          if (e == cudaSuccess) return true;
          if (e == cudaErrorNotReady) return false;
          return StatusFromCuda(e, "cudaStreamQuery");
        },
        what);
    if (absl::IsDeadlineExceeded(s)) Abort(s);  // NCCL cannot be un-stuck.
    return s;
  }

  const int rank_;
  const int world_size_;
  const int device_;
  const bool keep_for_shrink_;
  std::atomic<bool> aborted_{false};
  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);
  cudaStream_t stream_;
  void* scratch_;
};

absl::Status NcclP2P::Wait(absl::Time deadline) {
  return backend_->WaitEvent(event_, deadline);
}

int DefaultDevice(int devices, int rank) {
  int local_rank = rank;
  if (const char* v = platform::NonEmptyEnv("LOCAL_RANK")) {
    (void)absl::SimpleAtoi(v, &local_rank);
  }
  return local_rank % devices;
}

}  // namespace

bool NcclUsable(std::string* why_not) {
  const GpuProbe& probe = Probe();
  if (!probe.usable && why_not != nullptr) *why_not = probe.why_not;
  return probe.usable;
}

bool IsDevicePointer(const void* p) {
  if (p == nullptr || !Probe().usable) return false;
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice ||
         attributes.type == cudaMemoryTypeManaged;
}

absl::StatusOr<std::unique_ptr<Backend>> ConnectNccl(const CoreConfig& config,
                                                     absl::Time deadline) {
  const std::string who =
      absl::StrCat("rank ", config.rank, "/", config.world_size);
  std::string why;
  if (!NcclUsable(&why)) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": the NCCL backend cannot run here: ", why));
  }
  const int device = config.options.cuda_device >= 0
                         ? config.options.cuda_device
                         : DefaultDevice(Probe().devices, config.rank);
  if (device >= Probe().devices) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": CUDA device ", device, " does not exist (",
                     Probe().devices, " devices)"));
  }
  MUSTER_RETURN_IF_ERROR(StatusFromCuda(cudaSetDevice(device),
                                        absl::StrCat(who, ": cudaSetDevice")));

  // Rank 0's unique id travels through the store.
  const std::string id_key = absl::StrCat(config.key_prefix, "nccl_unique_id");
  ncclUniqueId id;
  if (config.rank == 0) {
    MUSTER_RETURN_IF_ERROR(StatusFromNccl(
        ncclGetUniqueId(&id), absl::StrCat(who, ": ncclGetUniqueId")));
    MUSTER_RETURN_IF_ERROR(config.store->Set(
        id_key, absl::string_view(id.internal, sizeof(id.internal))));
  } else {
    MUSTER_ASSIGN_OR_RETURN(
        std::string value,
        config.store->Get(
            id_key, std::max(deadline - absl::Now(), absl::Milliseconds(1))));
    if (value.size() != sizeof(id.internal)) {
      return absl::InternalError(
          absl::StrCat(who, ": the NCCL unique id in the store has ",
                       value.size(), " bytes, not ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, value.data(), sizeof(id.internal));
  }

  cudaStream_t stream = nullptr;
  MUSTER_RETURN_IF_ERROR(
      StatusFromCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                     absl::StrCat(who, ": cudaStreamCreate")));
  void* scratch = nullptr;
  absl::Status alloc = StatusFromCuda(cudaMalloc(&scratch, sizeof(int32_t) * 4),
                                      absl::StrCat(who, ": cudaMalloc"));
  if (!alloc.ok()) {
    cudaStreamDestroy(stream);
    return alloc;
  }
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;  // So that init can be bounded by the deadline.
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, config.world_size, id,
                                          config.rank, &nccl_config);
  absl::Status status;
  if (r != ncclSuccess && r != ncclInProgress) {
    status = StatusFromNccl(r, absl::StrCat(who, ": ncclCommInitRank"), comm);
  } else {
    status =
        WaitForInit(comm, deadline, absl::StrCat(who, ": ncclCommInitRank"));
  }
  if (!status.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    cudaStreamDestroy(stream);
    cudaFree(scratch);
    return status;
  }
  MUSTER_LOG(DEBUG) << who << ": NCCL communicator on CUDA device " << device;
  return std::unique_ptr<Backend>(
      new NcclBackend(config.rank, config.world_size, device, comm, stream,
                      scratch, /*keep_for_shrink=*/config.round != nullptr));
}

#endif  // MUSTER_WITH_NCCL

}  // namespace muster::comm::internal
