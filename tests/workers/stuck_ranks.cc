/* A worker for `muster stacks` and the hang report (issue 28): rank
 * MUSTER_TEST_STUCK_RANK (default 3) blocks in stuck_in_data_loader(), every
 * other rank in wait_in_allreduce(); each blocks in a plain wait (pause), so
 * the stacks stay put until the agent stops the worker. Built with -g -O0 so
 * the functions keep their frames and names; extern "C" keeps the names
 * plain. */
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

static volatile sig_atomic_t stop;

static void on_term(int sig) {
  (void)sig;
  stop = 1;
}

extern "C" __attribute__((noinline)) void stuck_in_data_loader() {
  while (!stop) pause();
}

extern "C" __attribute__((noinline)) void wait_in_allreduce() {
  while (!stop) pause();
}

int main() {
  signal(SIGTERM, on_term);
  const char* rank = getenv("RANK");
  const char* stuck = getenv("MUSTER_TEST_STUCK_RANK");
  const int r = rank != nullptr ? atoi(rank) : 0;
  const int s = stuck != nullptr ? atoi(stuck) : 3;
  printf("rank %d started\n", r);
  fflush(stdout);
  if (r == s) {
    stuck_in_data_loader();
  } else {
    wait_in_allreduce();
  }
  return 0;
}
