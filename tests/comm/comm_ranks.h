// Helpers of the comm process tests (comm_init_test, comm_process_test,
// comm_kill_load_test): the ranks' own reports, and jobs whose rank 0 serves
// the store on a free port of loopback without racing other tests for it.
#ifndef MUSTER_TESTS_COMM_COMM_RANKS_H_
#define MUSTER_TESTS_COMM_COMM_RANKS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/subprocess.h"

namespace muster::comm_testing {

// The N of "rank R/W: AllReduce failed after N ms" in `output` (comm_worker
// --mode=kill), or -1 when rank `rank` did not report.
int FailedAfterMs(const std::string& output, int rank);

// Starts one rank of a job whose rank 0 serves the store on `port`.
using StartRank =
    std::function<std::unique_ptr<testing::Subprocess>(int rank, int port)>;

// Starts the `world_size` ranks of a job whose rank 0 serves the store on a
// port of 127.0.0.1 (tcp://127.0.0.1:PORT, or env:// with MASTER_PORT).
// A port FreePort found free may be taken by another process before rank 0
// binds it, and then the job would fail (or its ranks reach a stranger's
// server). So rank 0 starts first, the others once it holds the port (seen
// in /proc, within `bind_timeout`); a rank 0 that could not listen is tried
// again on another port, up to 10 times. A rank 0 that exits for another
// reason, or does not bind in time, is left for the test to report: the
// others are started all the same.
std::vector<std::unique_ptr<testing::Subprocess>> StartOnServedPort(
    int world_size, const StartRank& start,
    absl::Duration bind_timeout = absl::Seconds(60));

// StartOnServedPort for `world_size` comm_worker processes with
// --init=tcp://127.0.0.1:PORT --rank=R --world-size=N and `args`, each with
// EnvWithoutLauncher() plus `env`.
std::vector<std::unique_ptr<testing::Subprocess>> StartTcpWorkers(
    int world_size, const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env = {});

}  // namespace muster::comm_testing

#endif  // MUSTER_TESTS_COMM_COMM_RANKS_H_
