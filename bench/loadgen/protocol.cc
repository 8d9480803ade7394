#include "bench/loadgen/protocol.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace muster::loadgen {
namespace {

// The `want` fields of `line` after its first word, which must be `kind`;
// with `rest` the last field is the rest of the line, spaces and all.
bool Fields(absl::string_view line, absl::string_view kind, size_t want,
            std::vector<absl::string_view>* out, bool rest = false) {
  std::vector<absl::string_view> f;
  if (rest) {
    f = absl::StrSplit(line, absl::MaxSplits(' ', want));
  } else {
    f = absl::StrSplit(line, ' ', absl::SkipEmpty());
  }
  if (f.empty() || f[0] != kind) return false;
  f.erase(f.begin());
  if (f.size() != want) return false;
  *out = std::move(f);
  return true;
}

bool Int(absl::string_view s, int64_t* v) { return absl::SimpleAtoi(s, v); }
bool Bool(absl::string_view s, bool* v) {
  int64_t i;
  if (!absl::SimpleAtoi(s, &i) || (i != 0 && i != 1)) return false;
  *v = i == 1;
  return true;
}
bool Double(absl::string_view s, double* v) { return absl::SimpleAtod(s, v); }

}  // namespace

std::string ToLine(const FormedReply& r) {
  return absl::StrCat("formed ", r.formed ? 1 : 0, " ", r.ready, " ",
                      r.first_join_ns, " ", r.last_ready_ns);
}

std::string ToLine(const HeartbeatReply& r) {
  return absl::StrFormat("hb %d %.6f %.3f %.3f %.3f", r.beats, r.elapsed_s,
                         r.full_rate, r.interval_min_ms, r.interval_max_ms);
}

std::string ToLine(const LossReply& r) {
  return absl::StrCat("lost ", r.reformed ? 1 : 0, " ", r.restarts, " ",
                      r.survivors, " ", r.killed_ns, " ", r.last_restart_ns,
                      " ", r.last_ready_ns);
}

std::string ToLine(const EndReply& r) {
  // One line: an error message's own newlines become spaces.
  return absl::StrFormat(
      "end %.3f %d %d %d %s", r.heartbeat_lag_max_ms, r.errors, r.finished,
      r.streams,
      absl::StrReplaceAll(r.first_error, {{"\n", " "}, {"\r", " "}}));
}

bool Parse(absl::string_view line, FormedReply* r) {
  std::vector<absl::string_view> f;
  return Fields(line, "formed", 4, &f) && Bool(f[0], &r->formed) &&
         Int(f[1], &r->ready) && Int(f[2], &r->first_join_ns) &&
         Int(f[3], &r->last_ready_ns);
}

bool Parse(absl::string_view line, HeartbeatReply* r) {
  std::vector<absl::string_view> f;
  return Fields(line, "hb", 5, &f) && Int(f[0], &r->beats) &&
         Double(f[1], &r->elapsed_s) && Double(f[2], &r->full_rate) &&
         Double(f[3], &r->interval_min_ms) && Double(f[4], &r->interval_max_ms);
}

bool Parse(absl::string_view line, LossReply* r) {
  std::vector<absl::string_view> f;
  return Fields(line, "lost", 6, &f) && Bool(f[0], &r->reformed) &&
         Int(f[1], &r->restarts) && Int(f[2], &r->survivors) &&
         Int(f[3], &r->killed_ns) && Int(f[4], &r->last_restart_ns) &&
         Int(f[5], &r->last_ready_ns);
}

bool Parse(absl::string_view line, EndReply* r) {
  std::vector<absl::string_view> f;
  if (!Fields(line, "end", 5, &f, /*rest=*/true) ||
      !Double(f[0], &r->heartbeat_lag_max_ms) || !Int(f[1], &r->errors) ||
      !Int(f[2], &r->finished) || !Int(f[3], &r->streams))
    return false;
  r->first_error = std::string(f[4]);
  return true;
}

std::vector<std::string> LatencyLines(const std::vector<double>& latency_ms) {
  constexpr size_t kPerLine = 1000;
  std::vector<std::string> lines;
  for (size_t i = 0; i < latency_ms.size(); i += kPerLine) {
    std::string line = "lat";
    for (size_t j = i; j < std::min(i + kPerLine, latency_ms.size()); ++j)
      absl::StrAppendFormat(&line, " %.3f", latency_ms[j]);
    lines.push_back(std::move(line));
  }
  return lines;
}

bool ParseLatencies(absl::string_view line, std::vector<double>* out) {
  std::vector<absl::string_view> f =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (f.empty() || f[0] != "lat") return false;
  for (size_t i = 1; i < f.size(); ++i) {
    double v;
    if (!absl::SimpleAtod(f[i], &v)) return false;
    out->push_back(v);
  }
  return true;
}

bool WriteLine(int fd, absl::string_view line) {
  const std::string data = absl::StrCat(line, "\n");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

LineReader::Result LineReader::Next(absl::Time deadline, std::string* line) {
  while (!Pop(line)) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return Result::kTimeout;
      timeout_ms = static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    }
    pollfd p{fd_, POLLIN, 0};
    const int n = poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Result::kEof;
    if (n == 0) continue;  // the deadline check above ends it
    if (!Fill()) return Result::kEof;
  }
  return Result::kLine;
}

bool LineReader::Fill() {
  char chunk[65536];
  for (;;) {
    const ssize_t n = read(fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
}

bool LineReader::Pop(std::string* line) {
  const size_t end = buffer_.find('\n');
  if (end == std::string::npos) return false;
  line->assign(buffer_, 0, end);
  buffer_.erase(0, end + 1);
  return true;
}

}  // namespace muster::loadgen
