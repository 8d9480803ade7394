/* libmuster_comm's C API: the C++ API (muster/comm/communicator.h) for C and
 * for anything with a C FFI (Python ctypes, Rust, Go, Julia).
 *
 *   muster_comm_t* comm = NULL;
 *   if (muster_comm_init("env://", -1, -1, NULL, &comm) != MUSTER_OK) {
 *     fprintf(stderr, "%s\n", muster_last_error());
 *     return 1;
 *   }
 *   muster_allreduce(comm, grad, grad, n, MUSTER_FLOAT32, MUSTER_SUM);
 *   muster_comm_free(comm);
 *
 * ERRORS. Every function that can fail returns a muster_status_t: MUSTER_OK
 * (0) or one of the codes below, whose values are absl::StatusCode's (and
 * gRPC's). The message of the last failure ON THE CALLING THREAD is
 * muster_last_error() (valid until the thread's next failing call). The codes
 * mean what they mean in the C++ API: MUSTER_INVALID_ARGUMENT (a bad argument;
 * the communicator stays usable), MUSTER_FAILED_PRECONDITION (cannot work
 * here: no launcher variables, no GPU for NCCL, shut down),
 * MUSTER_DEADLINE_EXCEEDED (a timeout), MUSTER_ABORTED (a peer was lost or
 * failed — the message names its rank — or the launcher ended the round),
 * MUSTER_UNAVAILABLE (a peer or the store cannot be reached).
 *
 * BLOCKING AND THREADS: as the C++ API. Blocking calls return when this
 * rank's part is done or the timeout passes; muster_*_async calls return at
 * once with a work handle. Functions may be called from any thread; every rank
 * must issue the same collectives in the same order. No function keeps a
 * pointer to its arguments past its return, except the buffers of an
 * asynchronous operation, which must stay valid until muster_work_wait
 * returns something other than MUSTER_WORK_RUNNING or muster_comm_free.
 *
 * Values of the enums never change.
 */
#ifndef MUSTER_COMM_C_API_H_
#define MUSTER_COMM_C_API_H_

#include <stddef.h>
#include <stdint.h>

/* MUSTER_COMM_API marks the functions of this API, the only symbols the DLL
 * (Windows) exports. The C API, not the C++ one, is the DLL's stable
 * interface: C++ across a DLL boundary ties its users to the compiler and the
 * C++ runtime the DLL was built with (name mangling, std::string, exceptions),
 * C does not.
 *   - Users of muster_comm.dll (linked with its import library,
 *     libmuster_comm.dll.a) define nothing: the functions are dllimport.
 *   - Users of the static library (libmuster_comm.a) define MUSTER_COMM_STATIC
 *     (the CMake target muster_comm does it for its users).
 *   - The DLL's own build defines MUSTER_COMM_BUILDING_DLL (dllexport).
 * Elsewhere the functions have default visibility (for a shared build with
 * -fvisibility=hidden). */
#if defined(_WIN32)
#if defined(MUSTER_COMM_BUILDING_DLL)
#define MUSTER_COMM_API __declspec(dllexport)
#elif defined(MUSTER_COMM_STATIC)
#define MUSTER_COMM_API
#else
#define MUSTER_COMM_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define MUSTER_COMM_API __attribute__((visibility("default")))
#else
#define MUSTER_COMM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The enums are int-sized in both languages. C++ gets `int` as their fixed
 * underlying type, so a value a C caller made up (an unknown dtype, say) is
 * still a valid value there, and is refused with MUSTER_INVALID_ARGUMENT
 * instead of being undefined behaviour. */
#ifdef __cplusplus
#define MUSTER_C_ENUM(name) enum name : int
#else
#define MUSTER_C_ENUM(name) enum name
#endif

/* (clang-format cannot lay out an enum whose head is a macro.) */
/* clang-format off */
typedef MUSTER_C_ENUM(muster_status) {
  MUSTER_OK = 0,
  MUSTER_CANCELLED = 1,
  MUSTER_UNKNOWN = 2,
  MUSTER_INVALID_ARGUMENT = 3,
  MUSTER_DEADLINE_EXCEEDED = 4,
  MUSTER_NOT_FOUND = 5,
  MUSTER_ALREADY_EXISTS = 6,
  MUSTER_PERMISSION_DENIED = 7,
  MUSTER_RESOURCE_EXHAUSTED = 8,
  MUSTER_FAILED_PRECONDITION = 9,
  MUSTER_ABORTED = 10,
  MUSTER_OUT_OF_RANGE = 11,
  MUSTER_UNIMPLEMENTED = 12,
  MUSTER_INTERNAL = 13,
  MUSTER_UNAVAILABLE = 14,
  MUSTER_DATA_LOSS = 15,
  MUSTER_UNAUTHENTICATED = 16,
  /* muster_work_wait only: the timeout passed, the operation still runs. */
  MUSTER_WORK_RUNNING = 100
} muster_status_t;

/* As muster::comm::DataType. */
typedef MUSTER_C_ENUM(muster_dtype) {
  MUSTER_FLOAT32 = 0,
  MUSTER_FLOAT64 = 1,
  MUSTER_INT32 = 2,
  MUSTER_INT64 = 3,
  MUSTER_INT8 = 4,
  MUSTER_UINT8 = 5,
  MUSTER_FLOAT16 = 6,
  MUSTER_BFLOAT16 = 7
} muster_dtype_t;

/* As muster::comm::ReduceOp. */
typedef MUSTER_C_ENUM(muster_op) {
  MUSTER_SUM = 0,
  MUSTER_PRODUCT = 1,
  MUSTER_MIN = 2,
  MUSTER_MAX = 3,
  MUSTER_AVG = 4
} muster_op_t;

/* As muster::comm::Backend. */
typedef MUSTER_C_ENUM(muster_backend) {
  MUSTER_BACKEND_AUTO = 0,
  MUSTER_BACKEND_GLOO = 1,
  MUSTER_BACKEND_NCCL = 2
} muster_backend_t;
/* clang-format on */

typedef struct muster_comm muster_comm_t;
typedef struct muster_work muster_work_t;

/* Options of muster_comm_init; zero-initialize, then set what matters
 * (muster_comm_options_init does so). */
typedef struct muster_comm_options {
  /* Initialization and default per-operation timeout in milliseconds; 0: 30
   * minutes (MUSTER_COMM_TIMEOUT overrides either). */
  int64_t timeout_ms;
  /* The network interface (NCCL syntax, see CommOptions::ifname), or NULL. */
  const char* ifname;
  muster_backend_t backend;
  /* The CUDA device for NCCL; -1: LOCAL_RANK modulo the device count. */
  int cuda_device;
} muster_comm_options_t;

/* Fills *options with the defaults. */
MUSTER_COMM_API void muster_comm_options_init(muster_comm_options_t* options);

/* Joins a communicator: init_method is "env://" (or NULL), "tcp://HOST:PORT"
 * or "file:///PATH"; rank and world_size < 0 read RANK and WORLD_SIZE;
 * options may be NULL. On success *comm is the new communicator (free it with
 * muster_comm_free). Blocks until every rank is connected or the timeout. */
MUSTER_COMM_API muster_status_t
muster_comm_init(const char* init_method, int rank, int world_size,
                 const muster_comm_options_t* options, muster_comm_t** comm);

/* A subgroup of the parent ranks `ranks[0..n)` (see Communicator::NewGroup).
 * Non-members get MUSTER_OK and *group == NULL. */
MUSTER_COMM_API muster_status_t muster_comm_new_group(muster_comm_t* comm,
                                                      const int* ranks, int n,
                                                      muster_comm_t** group);

/* ---- In-place recovery (muster --recovery=in-place; the guarantees are
 * communicator.h's IN-PLACE RECOVERY: what a failed collective left in the
 * buffers, which ranks continue, work handles and groups) ---- */

/* Where muster_comm_recover put this rank. */
typedef struct muster_recover_result {
  int rank;
  int world_size;
  int previous_rank;
  int previous_world_size;
  int64_t round; /* the launcher's round number */
} muster_recover_result_t;

/* 1 when the communicator's round has ended (the agent announced the next
 * round, or an operation failed): every call but muster_comm_recover then
 * fails with MUSTER_FAILED_PRECONDITION naming the round. One small file
 * read; never blocks. 0 without the control channel (MUSTER_CONTROL_DIR) or
 * for a NULL comm. Thread-safe. */
MUSTER_COMM_API int muster_comm_round_changed(muster_comm_t* comm);

/* Waits up to timeout_ms (<= 0: 5 minutes) for the next round, re-forms the
 * communicator on it, and fills *result (may be NULL). Not concurrently with
 * any other call on this communicator. Errors: MUSTER_FAILED_PRECONDITION
 * without the control channel, on a group, or after shutdown;
 * MUSTER_DEADLINE_EXCEEDED when no round comes (the message names the control
 * directory and the round waited from). Groups of the ended round are not
 * recovered: free them and make them again. */
MUSTER_COMM_API muster_status_t muster_comm_recover(
    muster_comm_t* comm, int64_t timeout_ms, muster_recover_result_t* result);

/* Never block. -1 for a NULL comm. */
MUSTER_COMM_API int muster_comm_rank(const muster_comm_t* comm);
MUSTER_COMM_API int muster_comm_world_size(const muster_comm_t* comm);

/* Says goodbye to the peers and closes the connections (waits for queued
 * operations first). Idempotent; later operations fail with
 * MUSTER_FAILED_PRECONDITION. */
MUSTER_COMM_API void muster_comm_shutdown(muster_comm_t* comm);

/* Shuts down and frees; NULL is ignored. */
MUSTER_COMM_API void muster_comm_free(muster_comm_t* comm);

/* The message of the calling thread's last failure ("" if none). */
MUSTER_COMM_API const char* muster_last_error(void);

/* "OK", "INVALID_ARGUMENT", ..., "WORK_RUNNING". */
MUSTER_COMM_API const char* muster_status_name(muster_status_t status);

/* The progress heartbeat (muster/comm/progress.h): "still alive". */
MUSTER_COMM_API muster_status_t muster_report_progress(void);

/* ---- Collectives (see communicator.h for each one's contract) ----
 * timeout_ms of the _ex variants: this call's timeout; 0 = the
 * communicator's. */
MUSTER_COMM_API muster_status_t muster_allreduce(muster_comm_t* comm,
                                                 const void* input,
                                                 void* output, size_t count,
                                                 muster_dtype_t dtype,
                                                 muster_op_t op);
MUSTER_COMM_API muster_status_t muster_allreduce_ex(
    muster_comm_t* comm, const void* input, void* output, size_t count,
    muster_dtype_t dtype, muster_op_t op, int64_t timeout_ms);
MUSTER_COMM_API muster_status_t muster_reduce(muster_comm_t* comm,
                                              const void* input, void* output,
                                              size_t count,
                                              muster_dtype_t dtype,
                                              muster_op_t op, int root);
MUSTER_COMM_API muster_status_t muster_broadcast(muster_comm_t* comm,
                                                 void* data, size_t count,
                                                 muster_dtype_t dtype,
                                                 int root);
MUSTER_COMM_API muster_status_t muster_allgather(muster_comm_t* comm,
                                                 const void* input,
                                                 void* output, size_t count,
                                                 muster_dtype_t dtype);
/* counts: world_size entries. */
MUSTER_COMM_API muster_status_t muster_allgatherv(muster_comm_t* comm,
                                                  const void* input,
                                                  void* output,
                                                  const size_t* counts,
                                                  muster_dtype_t dtype);
MUSTER_COMM_API muster_status_t muster_gather(muster_comm_t* comm,
                                              const void* input, void* output,
                                              size_t count,
                                              muster_dtype_t dtype, int root);
MUSTER_COMM_API muster_status_t muster_scatter(muster_comm_t* comm,
                                               const void* input, void* output,
                                               size_t count,
                                               muster_dtype_t dtype, int root);
MUSTER_COMM_API muster_status_t
muster_reduce_scatter(muster_comm_t* comm, const void* input, void* output,
                      size_t count, muster_dtype_t dtype, muster_op_t op);
MUSTER_COMM_API muster_status_t muster_alltoall(muster_comm_t* comm,
                                                const void* input, void* output,
                                                size_t count,
                                                muster_dtype_t dtype);
MUSTER_COMM_API muster_status_t muster_barrier(muster_comm_t* comm);
MUSTER_COMM_API muster_status_t muster_send(muster_comm_t* comm,
                                            const void* data, size_t count,
                                            muster_dtype_t dtype, int peer,
                                            uint32_t tag);
MUSTER_COMM_API muster_status_t muster_recv(muster_comm_t* comm, void* data,
                                            size_t count, muster_dtype_t dtype,
                                            int peer, uint32_t tag);

/* ---- Asynchronous variants: *work is set on MUSTER_OK ---- */
MUSTER_COMM_API muster_status_t muster_allreduce_async(
    muster_comm_t* comm, const void* input, void* output, size_t count,
    muster_dtype_t dtype, muster_op_t op, muster_work_t** work);
MUSTER_COMM_API muster_status_t muster_broadcast_async(muster_comm_t* comm,
                                                       void* data, size_t count,
                                                       muster_dtype_t dtype,
                                                       int root,
                                                       muster_work_t** work);
MUSTER_COMM_API muster_status_t muster_allgather_async(
    muster_comm_t* comm, const void* input, void* output, size_t count,
    muster_dtype_t dtype, muster_work_t** work);
MUSTER_COMM_API muster_status_t muster_reduce_scatter_async(
    muster_comm_t* comm, const void* input, void* output, size_t count,
    muster_dtype_t dtype, muster_op_t op, muster_work_t** work);
MUSTER_COMM_API muster_status_t muster_barrier_async(muster_comm_t* comm,
                                                     muster_work_t** work);
MUSTER_COMM_API muster_status_t muster_send_async(
    muster_comm_t* comm, const void* data, size_t count, muster_dtype_t dtype,
    int peer, uint32_t tag, muster_work_t** work);
MUSTER_COMM_API muster_status_t muster_recv_async(muster_comm_t* comm,
                                                  void* data, size_t count,
                                                  muster_dtype_t dtype,
                                                  int peer, uint32_t tag,
                                                  muster_work_t** work);

/* Waits up to timeout_ms (< 0: no limit) for the operation. Returns its
 * status, or MUSTER_WORK_RUNNING when the timeout passed first (wait again
 * later). */
MUSTER_COMM_API muster_status_t muster_work_wait(muster_work_t* work,
                                                 int64_t timeout_ms);
/* 1 when the operation has finished, else 0. Never blocks. */
MUSTER_COMM_API int muster_work_done(const muster_work_t* work);
/* Frees the handle (the operation goes on; see BLOCKING AND THREADS). */
MUSTER_COMM_API void muster_work_free(muster_work_t* work);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MUSTER_COMM_C_API_H_ */
