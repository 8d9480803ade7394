/* The C API, from C: three ranks as threads of this process on a file://
 * store, every kind of call, the error path (codes and messages), async work
 * and a subgroup. Prints one line per failure and "c_api_test: OK" at the end;
 * exits non-zero on any failure. On Windows it is linked against
 * muster_comm.dll's import library (win_c_api_test). */
#include "muster/comm/c_api.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 3

static char init_method[512];
static int failures = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(int rank, const char* what, const char* detail) {
  pthread_mutex_lock(&lock);
  fprintf(stderr, "c_api_test: rank %d: %s: %s\n", rank, what, detail);
  ++failures;
  pthread_mutex_unlock(&lock);
}

#define CHECK_OK(rank, call)                                         \
  do {                                                               \
    muster_status_t s_ = (call);                                     \
    if (s_ != MUSTER_OK) {                                           \
      char buf_[1024];                                               \
      snprintf(buf_, sizeof(buf_), "%s: %s", muster_status_name(s_), \
               muster_last_error());                                 \
      fail(rank, #call, buf_);                                       \
      return NULL;                                                   \
    }                                                                \
  } while (0)

#define EXPECT(rank, cond)                         \
  do {                                             \
    if (!(cond)) fail(rank, "expectation", #cond); \
  } while (0)

static void* run_rank(void* arg) {
  const int rank = (int)(intptr_t)arg;
  muster_comm_options_t options;
  muster_comm_options_init(&options);
  options.timeout_ms = 60000;
  options.backend = MUSTER_BACKEND_GLOO;
  muster_comm_t* comm = NULL;
  CHECK_OK(rank, muster_comm_init(init_method, rank, N, &options, &comm));
  EXPECT(rank, muster_comm_rank(comm) == rank);
  EXPECT(rank, muster_comm_world_size(comm) == N);

  /* AllReduce: out of place sum, in place average, min on int8. */
  float in[4] = {1.0f + rank, 2.0f, 3.0f, 4.0f};
  float out[4] = {0};
  CHECK_OK(rank,
           muster_allreduce(comm, in, out, 4, MUSTER_FLOAT32, MUSTER_SUM));
  EXPECT(rank, out[0] == 1 + 2 + 3 && out[3] == 12.0f && in[0] == 1.0f + rank);
  int32_t avg[2] = {rank * 3, 7};
  CHECK_OK(rank, muster_allreduce(comm, avg, avg, 2, MUSTER_INT32, MUSTER_AVG));
  EXPECT(rank, avg[0] == 3 && avg[1] == 7);
  int8_t small = (int8_t)(-rank);
  CHECK_OK(rank, muster_allreduce_ex(comm, &small, &small, 1, MUSTER_INT8,
                                     MUSTER_MIN, 5000));
  EXPECT(rank, small == -(N - 1));

  /* Reduce to rank 1, Broadcast from rank 2. */
  double d = rank + 0.5;
  double reduced = -1;
  CHECK_OK(rank,
           muster_reduce(comm, &d, &reduced, 1, MUSTER_FLOAT64, MUSTER_MAX, 1));
  if (rank == 1) EXPECT(rank, reduced == N - 0.5);
  int64_t b[3] = {rank, rank, rank};
  CHECK_OK(rank, muster_broadcast(comm, b, 3, MUSTER_INT64, 2));
  EXPECT(rank, b[0] == 2 && b[2] == 2);

  /* AllGather, AllGatherV, Gather, Scatter. */
  uint8_t mine = (uint8_t)(10 + rank);
  uint8_t all[N];
  CHECK_OK(rank, muster_allgather(comm, &mine, all, 1, MUSTER_UINT8));
  for (int r = 0; r < N; ++r) EXPECT(rank, all[r] == 10 + r);
  size_t counts[N];
  for (int r = 0; r < N; ++r) counts[r] = (size_t)r + 1; /* 1 + 2 + 3 */
  int32_t vin[N];
  for (int i = 0; i < rank + 1; ++i) vin[i] = rank * 100 + i;
  int32_t vout[6];
  CHECK_OK(rank, muster_allgatherv(comm, vin, vout, counts, MUSTER_INT32));
  EXPECT(rank, vout[0] == 0 && vout[1] == 100 && vout[2] == 101 &&
                   vout[3] == 200 && vout[5] == 202);
  int32_t gathered[N] = {-1, -1, -1};
  int32_t g = rank * 7;
  CHECK_OK(rank, muster_gather(comm, &g, rank == 0 ? gathered : NULL, 1,
                               MUSTER_INT32, 0));
  if (rank == 0) EXPECT(rank, gathered[1] == 7 && gathered[2] == 14);
  int32_t blocks[N] = {100, 101, 102};
  int32_t got = -1;
  CHECK_OK(rank, muster_scatter(comm, rank == 2 ? blocks : NULL, &got, 1,
                                MUSTER_INT32, 2));
  EXPECT(rank, got == 100 + rank);

  /* ReduceScatter and AllToAll. */
  float rs_in[N * 2];
  for (int i = 0; i < N * 2; ++i) rs_in[i] = (float)i;
  float rs_out[2];
  CHECK_OK(rank, muster_reduce_scatter(comm, rs_in, rs_out, 2, MUSTER_FLOAT32,
                                       MUSTER_SUM));
  EXPECT(rank, rs_out[0] == N * (float)(rank * 2) &&
                   rs_out[1] == N * (float)(rank * 2 + 1));
  int32_t a2a_in[N], a2a_out[N];
  for (int j = 0; j < N; ++j) a2a_in[j] = rank * 10 + j;
  CHECK_OK(rank, muster_alltoall(comm, a2a_in, a2a_out, 1, MUSTER_INT32));
  for (int r = 0; r < N; ++r) EXPECT(rank, a2a_out[r] == r * 10 + rank);

  /* Send/Recv around the ring, asynchronously. */
  const int right = (rank + 1) % N;
  const int left = (rank + N - 1) % N;
  int64_t token = 1000 + rank;
  int64_t received = -1;
  muster_work_t* send_work = NULL;
  muster_work_t* recv_work = NULL;
  CHECK_OK(rank, muster_send_async(comm, &token, 1, MUSTER_INT64, right, 3,
                                   &send_work));
  CHECK_OK(rank, muster_recv_async(comm, &received, 1, MUSTER_INT64, left, 3,
                                   &recv_work));
  CHECK_OK(rank, muster_work_wait(recv_work, -1));
  CHECK_OK(rank, muster_work_wait(send_work, 30000));
  EXPECT(rank, muster_work_done(recv_work) == 1);
  EXPECT(rank, received == 1000 + left);
  muster_work_free(send_work);
  muster_work_free(recv_work);

  /* Async AllReduce. */
  double big[1000];
  for (int i = 0; i < 1000; ++i) big[i] = 1.0;
  muster_work_t* work = NULL;
  CHECK_OK(rank, muster_allreduce_async(comm, big, big, 1000, MUSTER_FLOAT64,
                                        MUSTER_SUM, &work));
  CHECK_OK(rank, muster_work_wait(work, 30000));
  EXPECT(rank, big[999] == N);
  muster_work_free(work);

  /* Errors: a code and a message naming the problem; still usable after. */
  float x = 1.0f;
  muster_status_t s = muster_broadcast(comm, &x, 1, MUSTER_FLOAT32, 7);
  EXPECT(rank, s == MUSTER_INVALID_ARGUMENT);
  EXPECT(rank, strstr(muster_last_error(), "root 7") != NULL);
  EXPECT(rank, strcmp(muster_status_name(s), "INVALID_ARGUMENT") == 0);
  s = muster_allreduce(comm, NULL, NULL, 4, MUSTER_FLOAT32, MUSTER_SUM);
  EXPECT(rank, s == MUSTER_INVALID_ARGUMENT);
  s = muster_allreduce(comm, &x, &x, 1, (muster_dtype_t)42, MUSTER_SUM);
  EXPECT(rank, s == MUSTER_INVALID_ARGUMENT);
  EXPECT(rank, strstr(muster_last_error(), "unknown DataType 42") != NULL);
  EXPECT(rank, muster_barrier(NULL) == MUSTER_INVALID_ARGUMENT);
  EXPECT(rank, muster_report_progress() == MUSTER_OK);

  /* A subgroup of ranks 0 and 2; rank 1 gets NULL. */
  const int members[2] = {2, 0};
  muster_comm_t* group = NULL;
  CHECK_OK(rank, muster_comm_new_group(comm, members, 2, &group));
  if (rank == 1) {
    EXPECT(rank, group == NULL);
  } else {
    EXPECT(rank, group != NULL && muster_comm_world_size(group) == 2);
    EXPECT(rank, muster_comm_rank(group) == rank / 2);
    int32_t v = rank;
    CHECK_OK(rank,
             muster_allreduce(group, &v, &v, 1, MUSTER_INT32, MUSTER_SUM));
    EXPECT(rank, v == 2);
    muster_comm_free(group);
  }

  CHECK_OK(rank, muster_barrier(comm));
  muster_comm_shutdown(comm);
  s = muster_barrier(comm);
  EXPECT(rank, s == MUSTER_FAILED_PRECONDITION);
  muster_comm_free(comm);
  return NULL;
}

int main(void) {
#ifdef _WIN32
  /* file:///C:/DIR/FILE: the temp directory with forward slashes. */
  const char* tmp = getenv("TEMP");
  snprintf(init_method, sizeof(init_method), "file:///%s/muster-c-api-%d",
           tmp != NULL && tmp[0] != '\0' ? tmp : "C:/Windows/Temp",
           (int)getpid());
  for (char* c = init_method; *c != '\0'; ++c) {
    if (*c == '\\') *c = '/';
  }
#else
  const char* tmp = getenv("TMPDIR");
  snprintf(init_method, sizeof(init_method), "file://%s/muster-c-api-%d",
           tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", (int)getpid());
#endif
  pthread_t threads[N];
  for (int r = 0; r < N; ++r) {
    pthread_create(&threads[r], NULL, run_rank, (void*)(intptr_t)r);
  }
  for (int r = 0; r < N; ++r) pthread_join(threads[r], NULL);

  /* Init errors, without any rank to meet. */
  muster_comm_t* comm = NULL;
  muster_status_t s = muster_comm_init("nfs://nowhere", 0, 1, NULL, &comm);
  if (s != MUSTER_INVALID_ARGUMENT || comm != NULL ||
      strstr(muster_last_error(), "unknown init method") == NULL) {
    fail(-1, "init with an unknown scheme", muster_last_error());
  }
  muster_comm_options_t nccl;
  muster_comm_options_init(&nccl);
  nccl.backend = MUSTER_BACKEND_NCCL;
  char path[600];
  snprintf(path, sizeof(path), "%s-nccl", init_method);
  s = muster_comm_init(path, 0, 1, &nccl, &comm);
  if (s == MUSTER_OK) {
    printf("c_api_test: NCCL backend available here\n");
    muster_comm_free(comm);
  } else if (s != MUSTER_FAILED_PRECONDITION) {
    fail(-1, "NCCL without a GPU", muster_last_error());
  } else {
    printf("c_api_test: NCCL refused as expected: %s\n", muster_last_error());
  }

  if (failures > 0) {
    fprintf(stderr, "c_api_test: %d failures\n", failures);
    return 1;
  }
  printf("c_api_test: OK\n");
  return 0;
}
