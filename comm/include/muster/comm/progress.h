// The progress heartbeat: how a watchdog outside the worker (the muster agent)
// tells a worker that is slow from one that is stuck.
//
// MECHANISM. When the environment variable MUSTER_PROGRESS_FILE names a file
// (or CommOptions::progress_file does), the first communicator of the process
// creates it (mode 0644, replacing what was there) and maps it into memory.
// Every operation of every communicator of the process then updates it in
// place, twice (when it starts and when it ends), and ReportProgress() updates
// it whenever the program calls it. An update is a few stores into the mapped
// page: no system call, no lock held across processes, nothing that can block.
// A process that stops making progress stops updating the file; the file's
// contents outlive the process for the post-mortem.
//
// FORMAT. Exactly kProgressFileSize bytes of ASCII text, fields at fixed
// offsets with fixed widths, so a reader can parse it without locking:
//
//   muster-progress 2\n
//   pid 0000001234\n
//   updated_unix_ms 0001763456789012\n          last update of any kind
//   started 00000000000000000042\n              operations started
//   finished 00000000000000000041\n             operations finished
//   reported 00000000000000000007\n             ReportProgress calls
//   current AllReduce                      \n   operation in flight, or "-"
//   since_unix_ms 0001763456789000\n            when it started (0 if none)
//   compute_us 0000000081234567\n               time outside operations, us
//   wait_us 0000000012345678\n                  time inside operations, us
//
// The speed counters: compute_us adds up the time from the end of one
// operation to the start of the next (the rank's own work; nothing before its
// first operation), wait_us the time from the start of an operation to its end
// (sending, receiving, and waiting for the other ranks; overlapping operations
// count once). In a job whose ranks run the same collectives, the rank the
// others wait for is the one with the most compute time per operation: musterd
// scores each rank's speed from these (docs/architecture.md, "Stragglers").
// Format 1 (256 bytes, no speed counters) is still read, with both at 0.
//
// A writer updates `updated_unix_ms` last. A reader that wants a consistent
// picture reads the file twice and retries until both copies agree. A worker
// is "in a collective" when started > finished; "making progress" while
// updated_unix_ms advances. A long compute phase that runs no collective should
// call ReportProgress() now and then (each call costs well under a
// microsecond).
//
// The agent-side watchdog (`--worker-timeout`) sets MUSTER_PROGRESS_FILE for
// each worker and reads this file; programs that do not use libmuster_comm may
// write the same format themselves.
#ifndef MUSTER_COMM_PROGRESS_H_
#define MUSTER_COMM_PROGRESS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muster::comm {

inline constexpr size_t kProgressFileSize = 512;

// Says "this process is alive and making progress". Updates the progress file
// (opening it on the first call when MUSTER_PROGRESS_FILE is set and no
// communicator has yet). Without a progress file it does nothing and returns
// OK. Errors: UNAVAILABLE when the file cannot be created or mapped (once; the
// next call retries). Thread-safe; never blocks beyond creating the file.
absl::Status ReportProgress();

// What a progress file says (for the watchdog and for tests).
struct ProgressSnapshot {
  int64_t pid = 0;
  int64_t updated_unix_ms = 0;
  uint64_t started = 0;
  uint64_t finished = 0;
  uint64_t reported = 0;
  std::string current;  // "-" when idle.
  int64_t since_unix_ms = 0;
  uint64_t compute_us = 0;
  uint64_t wait_us = 0;
};

// Reads and parses a progress file, retrying (up to a few times) until two
// reads agree. Errors: NOT_FOUND, DATA_LOSS for a file in another format.
// Thread-safe.
absl::StatusOr<ProgressSnapshot> ReadProgressFile(const std::string& path);

}  // namespace muster::comm

#endif  // MUSTER_COMM_PROGRESS_H_
