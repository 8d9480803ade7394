// What muster-loadgen's parent and its shards (shard.h) say to each other:
// one text line per message over a pipe each way.
//
//   parent -> shard   go | abort | hb_start | hb_stop | lose | end
//   shard -> parent   ready                        set up, waiting for go
//                     lat <ms> <ms> ...            Join -> RoundReady, per
//                                                  agent (up to 1000 a line)
//                     formed ...  (FormedReply)    after go, the lat lines
//                     hb ...      (HeartbeatReply) after hb_stop
//                     lost ...    (LossReply)      after lose
//                     end ...     (EndReply)       after end; then it exits
//
// abort ends whatever the shard waits for (another shard failed, so its
// round will not form either); it is no phase and gets no reply. Times are
// absl::Now() as Unix nanoseconds: one clock for every process of the
// machine. Nothing here blocks except as documented; not thread-safe (one
// LineReader per fd and thread).
#ifndef MUSTER_BENCH_LOADGEN_PROTOCOL_H_
#define MUSTER_BENCH_LOADGEN_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster::loadgen {

// The shard's first round (reply to go).
struct FormedReply {
  bool formed = false;        // every agent of the shard got RoundReady
  int64_t ready = 0;          // agents that did
  int64_t first_join_ns = 0;  // the shard's earliest Join sent
  int64_t last_ready_ns = 0;  // its last RoundReady (0: none)
};

// The heartbeat phase, between hb_start and hb_stop (reply to hb_stop).
struct HeartbeatReply {
  int64_t beats = 0;     // heartbeats handed to gRPC
  double elapsed_s = 0;  // the shard's own hb_start -> hb_stop
  double full_rate = 0;  // heartbeats/s its agents' schedules ask for
  double interval_min_ms = 0;
  double interval_max_ms = 0;
};

// The node loss (reply to lose).
struct LossReply {
  bool reformed = false;  // the shard's agents of job 0 are in the next round
  int64_t restarts = 0;   // Restarts its survivors got
  int64_t survivors = 0;  // its agents of job 0, less the victim
  // When the victim was killed: only from the shard that holds it, else
  // INT64_MIN, as are the two below when no agent got there.
  int64_t killed_ns = INT64_MIN;
  int64_t last_restart_ns = INT64_MIN;
  int64_t last_ready_ns = INT64_MIN;  // survivors' 2nd, replacement's 1st
};

// The end (reply to end).
struct EndReply {
  double heartbeat_lag_max_ms = 0;
  int64_t errors = 0;       // streams that ended with an error
  int64_t finished = 0;     // streams done
  int64_t streams = 0;      // streams the shard started
  std::string first_error;  // the rest of the line; may be empty
};

std::string ToLine(const FormedReply& r);
std::string ToLine(const HeartbeatReply& r);
std::string ToLine(const LossReply& r);
std::string ToLine(const EndReply& r);
// Each returns whether `line` is a well-formed reply of its kind.
bool Parse(absl::string_view line, FormedReply* r);
bool Parse(absl::string_view line, HeartbeatReply* r);
bool Parse(absl::string_view line, LossReply* r);
bool Parse(absl::string_view line, EndReply* r);

// "lat ..." lines for `latency_ms`, up to 1000 values each.
std::vector<std::string> LatencyLines(const std::vector<double>& latency_ms);
// Appends a "lat ..." line's values to *out; returns whether it was one.
bool ParseLatencies(absl::string_view line, std::vector<double>* out);

// Writes `line` and a newline to fd, all of it (blocking while the pipe is
// full); false when the other end is gone (EPIPE: SIGPIPE must be ignored)
// or on another error.
bool WriteLine(int fd, absl::string_view line);

// Buffers what one fd delivers and splits it into lines.
class LineReader {
 public:
  enum class Result { kLine, kEof, kTimeout };

  explicit LineReader(int fd) : fd_(fd) {}

  int fd() const { return fd_; }

  // The next line (without its newline) into *line: blocks until one is
  // complete, the fd's end is closed (or fails: kEof) or the deadline
  // passes (absl::InfiniteFuture() for none).
  Result Next(absl::Time deadline, std::string* line);

  // One read() for when poll() said the fd is readable; false at EOF or on
  // an error.
  bool Fill();
  // A complete line already buffered, if any.
  bool Pop(std::string* line);

 private:
  const int fd_;
  std::string buffer_;
};

}  // namespace muster::loadgen

#endif  // MUSTER_BENCH_LOADGEN_PROTOCOL_H_
