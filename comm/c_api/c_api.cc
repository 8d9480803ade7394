// The C API over the C++ one: status codes and a per-thread error message in,
// absl::Status out. Nothing throws across the boundary (the C++ API does not
// throw; allocation failures are caught here).
#include "muster/comm/c_api.h"

#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "muster/comm/communicator.h"
#include "muster/comm/progress.h"

struct muster_comm {
  std::unique_ptr<muster::comm::Communicator> comm;
};

struct muster_work {
  std::unique_ptr<muster::comm::Work> work;
};

namespace {

using muster::comm::CallOptions;
using muster::comm::Communicator;
using muster::comm::DataType;
using muster::comm::ReduceOp;

thread_local std::string last_error;

muster_status_t Report(const absl::Status& status) {
  if (status.ok()) return MUSTER_OK;
  last_error = std::string(status.message());
  return static_cast<muster_status_t>(status.code());
}

muster_status_t NullArgument(const char* what) {
  return Report(absl::InvalidArgumentError(absl::StrCat(what, " is NULL")));
}

DataType Dtype(muster_dtype_t d) { return static_cast<DataType>(d); }
ReduceOp Op(muster_op_t o) { return static_cast<ReduceOp>(o); }

CallOptions Call(int64_t timeout_ms) {
  CallOptions call;
  if (timeout_ms > 0) call.timeout = absl::Milliseconds(timeout_ms);
  return call;
}

// Runs fn() with the C++ communicator; catches what must not cross into C.
template <typename Fn>
muster_status_t With(muster_comm_t* comm, Fn&& fn) {
  if (comm == nullptr || comm->comm == nullptr) return NullArgument("comm");
  try {
    return Report(fn(*comm->comm));
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError("out of memory"));
  } catch (...) {
    return Report(absl::InternalError("unexpected exception"));
  }
}

template <typename Fn>
muster_status_t StartWork(muster_comm_t* comm, muster_work_t** work, Fn&& fn) {
  if (work == nullptr) return NullArgument("work");
  *work = nullptr;
  return With(comm, [&](Communicator& c) -> absl::Status {
    absl::StatusOr<std::unique_ptr<muster::comm::Work>> started = fn(c);
    if (!started.ok()) return started.status();
    *work = new muster_work{std::move(*started)};
    return absl::OkStatus();
  });
}

}  // namespace

extern "C" {

void muster_comm_options_init(muster_comm_options_t* options) {
  if (options == nullptr) return;
  options->timeout_ms = 0;
  options->ifname = nullptr;
  options->backend = MUSTER_BACKEND_AUTO;
  options->cuda_device = -1;
}

muster_status_t muster_comm_init(const char* init_method, int rank,
                                 int world_size,
                                 const muster_comm_options_t* options,
                                 muster_comm_t** comm) {
  if (comm == nullptr) return NullArgument("comm");
  *comm = nullptr;
  muster::comm::CommOptions o;
  if (options != nullptr) {
    if (options->timeout_ms > 0)
      o.timeout = absl::Milliseconds(options->timeout_ms);
    if (options->ifname != nullptr) o.ifname = options->ifname;
    o.backend = static_cast<muster::comm::Backend>(options->backend);
    o.cuda_device = options->cuda_device;
  }
  try {
    absl::StatusOr<std::unique_ptr<Communicator>> created = Communicator::Init(
        init_method == nullptr ? "env://" : init_method, rank, world_size, o);
    if (!created.ok()) return Report(created.status());
    *comm = new muster_comm{std::move(*created)};
    return MUSTER_OK;
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError("out of memory"));
  }
}

muster_status_t muster_comm_new_group(muster_comm_t* comm, const int* ranks,
                                      int n, muster_comm_t** group) {
  if (group == nullptr) return NullArgument("group");
  *group = nullptr;
  if (ranks == nullptr && n > 0) return NullArgument("ranks");
  return With(comm, [&](Communicator& c) -> absl::Status {
    absl::StatusOr<std::unique_ptr<Communicator>> g =
        c.NewGroup(absl::MakeConstSpan(ranks, n < 0 ? 0 : n));
    if (!g.ok()) return g.status();
    if (*g != nullptr) *group = new muster_comm{std::move(*g)};
    return absl::OkStatus();
  });
}

int muster_comm_round_changed(muster_comm_t* comm) {
  if (comm == nullptr || comm->comm == nullptr) return 0;
  return comm->comm->RoundChanged() ? 1 : 0;
}

muster_status_t muster_comm_recover(muster_comm_t* comm, int64_t timeout_ms,
                                    muster_recover_result_t* result) {
  return With(comm, [&](Communicator& c) -> absl::Status {
    absl::StatusOr<muster::comm::RecoverResult> r = c.Recover(
        timeout_ms > 0 ? absl::Milliseconds(timeout_ms) : absl::Minutes(5));
    if (!r.ok()) return r.status();
    if (result != nullptr) {
      result->rank = r->rank;
      result->world_size = r->world_size;
      result->previous_rank = r->previous_rank;
      result->previous_world_size = r->previous_world_size;
      result->round = r->round;
    }
    return absl::OkStatus();
  });
}

int muster_comm_rank(const muster_comm_t* comm) {
  return comm == nullptr || comm->comm == nullptr ? -1 : comm->comm->rank();
}

int muster_comm_world_size(const muster_comm_t* comm) {
  return comm == nullptr || comm->comm == nullptr ? -1
                                                  : comm->comm->world_size();
}

void muster_comm_shutdown(muster_comm_t* comm) {
  if (comm != nullptr && comm->comm != nullptr) comm->comm->Shutdown();
}

void muster_comm_free(muster_comm_t* comm) { delete comm; }

const char* muster_last_error(void) { return last_error.c_str(); }

const char* muster_status_name(muster_status_t status) {
  if (status == MUSTER_WORK_RUNNING) return "WORK_RUNNING";
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(status);
  return i >= 0 && i < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))
             ? kNames[i]
             : "UNKNOWN_STATUS";
}

muster_status_t muster_report_progress(void) {
  return Report(muster::comm::ReportProgress());
}

muster_status_t muster_allreduce(muster_comm_t* comm, const void* input,
                                 void* output, size_t count,
                                 muster_dtype_t dtype, muster_op_t op) {
  return muster_allreduce_ex(comm, input, output, count, dtype, op, 0);
}

muster_status_t muster_allreduce_ex(muster_comm_t* comm, const void* input,
                                    void* output, size_t count,
                                    muster_dtype_t dtype, muster_op_t op,
                                    int64_t timeout_ms) {
  return With(comm, [&](Communicator& c) {
    return c.AllReduce(input, output, count, Dtype(dtype), Op(op),
                       Call(timeout_ms));
  });
}

muster_status_t muster_reduce(muster_comm_t* comm, const void* input,
                              void* output, size_t count, muster_dtype_t dtype,
                              muster_op_t op, int root) {
  return With(comm, [&](Communicator& c) {
    return c.Reduce(input, output, count, Dtype(dtype), Op(op), root);
  });
}

muster_status_t muster_broadcast(muster_comm_t* comm, void* data, size_t count,
                                 muster_dtype_t dtype, int root) {
  return With(comm, [&](Communicator& c) {
    return c.Broadcast(data, count, Dtype(dtype), root);
  });
}

muster_status_t muster_allgather(muster_comm_t* comm, const void* input,
                                 void* output, size_t count,
                                 muster_dtype_t dtype) {
  return With(comm, [&](Communicator& c) {
    return c.AllGather(input, output, count, Dtype(dtype));
  });
}

muster_status_t muster_allgatherv(muster_comm_t* comm, const void* input,
                                  void* output, const size_t* counts,
                                  muster_dtype_t dtype) {
  if (counts == nullptr) return NullArgument("counts");
  return With(comm, [&](Communicator& c) {
    return c.AllGatherV(
        input, output,
        absl::MakeConstSpan(counts, static_cast<size_t>(c.world_size())),
        Dtype(dtype));
  });
}

muster_status_t muster_gather(muster_comm_t* comm, const void* input,
                              void* output, size_t count, muster_dtype_t dtype,
                              int root) {
  return With(comm, [&](Communicator& c) {
    return c.Gather(input, output, count, Dtype(dtype), root);
  });
}

muster_status_t muster_scatter(muster_comm_t* comm, const void* input,
                               void* output, size_t count, muster_dtype_t dtype,
                               int root) {
  return With(comm, [&](Communicator& c) {
    return c.Scatter(input, output, count, Dtype(dtype), root);
  });
}

muster_status_t muster_reduce_scatter(muster_comm_t* comm, const void* input,
                                      void* output, size_t count,
                                      muster_dtype_t dtype, muster_op_t op) {
  return With(comm, [&](Communicator& c) {
    return c.ReduceScatter(input, output, count, Dtype(dtype), Op(op));
  });
}

muster_status_t muster_alltoall(muster_comm_t* comm, const void* input,
                                void* output, size_t count,
                                muster_dtype_t dtype) {
  return With(comm, [&](Communicator& c) {
    return c.AllToAll(input, output, count, Dtype(dtype));
  });
}

muster_status_t muster_barrier(muster_comm_t* comm) {
  return With(comm, [&](Communicator& c) { return c.Barrier(); });
}

muster_status_t muster_send(muster_comm_t* comm, const void* data, size_t count,
                            muster_dtype_t dtype, int peer, uint32_t tag) {
  return With(comm, [&](Communicator& c) {
    return c.Send(data, count, Dtype(dtype), peer, tag);
  });
}

muster_status_t muster_recv(muster_comm_t* comm, void* data, size_t count,
                            muster_dtype_t dtype, int peer, uint32_t tag) {
  return With(comm, [&](Communicator& c) {
    return c.Recv(data, count, Dtype(dtype), peer, tag);
  });
}

muster_status_t muster_allreduce_async(muster_comm_t* comm, const void* input,
                                       void* output, size_t count,
                                       muster_dtype_t dtype, muster_op_t op,
                                       muster_work_t** work) {
  return StartWork(comm, work, [&](Communicator& c) {
    return c.StartAllReduce(input, output, count, Dtype(dtype), Op(op));
  });
}

muster_status_t muster_broadcast_async(muster_comm_t* comm, void* data,
                                       size_t count, muster_dtype_t dtype,
                                       int root, muster_work_t** work) {
  return StartWork(comm, work, [&](Communicator& c) {
    return c.StartBroadcast(data, count, Dtype(dtype), root);
  });
}

muster_status_t muster_allgather_async(muster_comm_t* comm, const void* input,
                                       void* output, size_t count,
                                       muster_dtype_t dtype,
                                       muster_work_t** work) {
  return StartWork(comm, work, [&](Communicator& c) {
    return c.StartAllGather(input, output, count, Dtype(dtype));
  });
}

muster_status_t muster_reduce_scatter_async(muster_comm_t* comm,
                                            const void* input, void* output,
                                            size_t count, muster_dtype_t dtype,
                                            muster_op_t op,
                                            muster_work_t** work) {
  return StartWork(comm, work, [&](Communicator& c) {
    return c.StartReduceScatter(input, output, count, Dtype(dtype), Op(op));
  });
}

muster_status_t muster_barrier_async(muster_comm_t* comm,
                                     muster_work_t** work) {
  return StartWork(comm, work,
                   [&](Communicator& c) { return c.StartBarrier(); });
}

muster_status_t muster_send_async(muster_comm_t* comm, const void* data,
                                  size_t count, muster_dtype_t dtype, int peer,
                                  uint32_t tag, muster_work_t** work) {
  return StartWork(comm, work, [&](Communicator& c) {
    return c.StartSend(data, count, Dtype(dtype), peer, tag);
  });
}

muster_status_t muster_recv_async(muster_comm_t* comm, void* data, size_t count,
                                  muster_dtype_t dtype, int peer, uint32_t tag,
                                  muster_work_t** work) {
  return StartWork(comm, work, [&](Communicator& c) {
    return c.StartRecv(data, count, Dtype(dtype), peer, tag);
  });
}

muster_status_t muster_work_wait(muster_work_t* work, int64_t timeout_ms) {
  if (work == nullptr || work->work == nullptr) return NullArgument("work");
  const absl::Duration timeout = timeout_ms < 0
                                     ? absl::InfiniteDuration()
                                     : absl::Milliseconds(timeout_ms);
  if (timeout_ms >= 0 && !work->work->Done()) {
    absl::Status s = work->work->Wait(timeout);
    if (!work->work->Done()) {
      last_error = std::string(s.message());
      return MUSTER_WORK_RUNNING;
    }
    return Report(s);
  }
  return Report(work->work->Wait(timeout));
}

int muster_work_done(const muster_work_t* work) {
  return work != nullptr && work->work != nullptr && work->work->Done() ? 1 : 0;
}

void muster_work_free(muster_work_t* work) { delete work; }

}  // extern "C"
