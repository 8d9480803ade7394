#include "agent/src/watchdog.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "muster/platform/files.h"

namespace muster::agent {

std::optional<absl::Time> LastProgress(const std::string& path) {
  std::optional<absl::Time> mtime = platform::ModificationTime(path);
  if (!mtime.has_value()) return std::nullopt;
  absl::Time last = *mtime;
  std::ifstream f(path);
  std::string line;
  if (std::getline(f, line) && absl::StartsWith(line, "muster-progress ")) {
    while (std::getline(f, line)) {
      absl::string_view rest = line;
      if (!absl::ConsumePrefix(&rest, "updated_unix_ms ")) continue;
      int64_t ms = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &ms) && ms > 0) {
        last = std::max(last, absl::FromUnixMillis(ms));
      }
      break;
    }
  }
  return last;
}

std::optional<SpeedCounters> ReadSpeedCounters(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line) || line != "muster-progress 2")
    return std::nullopt;
  SpeedCounters c;
  int found = 0;
  while (std::getline(f, line) && found < 3) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    uint64_t* into = kv.first == "finished"     ? &c.finished
                     : kv.first == "compute_us" ? &c.compute_us
                     : kv.first == "wait_us"    ? &c.wait_us
                                                : nullptr;
    if (into == nullptr) continue;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), into)) {
      return std::nullopt;
    }
    ++found;
  }
  if (found < 3) return std::nullopt;
  return c;
}

Watchdog::Watchdog(absl::Duration timeout, std::vector<std::string> files,
                   absl::Time start, absl::Duration grace)
    : timeout_(timeout),
      grace_(grace),
      files_(std::move(files)),
      start_(start),
      reported_(files_.size()) {}

absl::Duration Watchdog::Silence(int local_rank, absl::Time now) const {
  std::optional<absl::Time> last =
      LastProgress(files_[static_cast<size_t>(local_rank)]);
  return now - std::max(start_, last.value_or(start_));
}

std::vector<int> Watchdog::Check(absl::Time now) {
  std::vector<int> hung;
  for (size_t i = 0; i < files_.size(); ++i) {
    if (reported_[i]) continue;
    if (Silence(static_cast<int>(i), now) > timeout_ + grace_) {
      reported_[i] = true;
      hung.push_back(static_cast<int>(i));
    }
  }
  return hung;
}

absl::Duration ServerWatchGrace(absl::Duration lease) {
  return std::max(absl::Seconds(2), lease / 2);
}

void NodeProgress::Watch(int64_t round, int rank_offset,
                         std::vector<std::string> files, absl::Time start,
                         bool report_silence) {
  absl::MutexLock lock(&mu_);
  round_ = round;
  rank_offset_ = rank_offset;
  report_silence_ = report_silence;
  files_ = std::move(files);
  start_ = start;
  watching_ = true;
}

void NodeProgress::Stop() {
  absl::MutexLock lock(&mu_);
  watching_ = false;
  files_.clear();
}

std::optional<std::pair<int64_t, absl::Duration>> NodeProgress::Silence(
    absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (!watching_) return std::nullopt;
  // The newest sign of life of any worker: the node progresses while one
  // does. A few stat() calls and small reads, once a heartbeat.
  absl::Time newest = start_;
  for (const std::string& file : files_) {
    newest = std::max(newest, LastProgress(file).value_or(start_));
  }
  return std::make_pair(round_, std::max(absl::ZeroDuration(), now - newest));
}

void NodeProgress::Fill(v1::Heartbeat* heartbeat) const {
  std::vector<std::string> files;
  int rank_offset = 0;
  bool report_silence = false;
  {
    absl::MutexLock lock(&mu_);
    if (!watching_ || round_ != heartbeat->round()) return;
    files = files_;
    rank_offset = rank_offset_;
    report_silence = report_silence_;
  }
  if (report_silence) {
    const auto silence = Silence(clock_->Now());
    if (silence.has_value() && silence->first == heartbeat->round()) {
      heartbeat->set_progress_age_ms(
          absl::ToInt64Milliseconds(silence->second));
    }
  }
  // The speed counters, read outside the lock: a few small reads a heartbeat.
  for (size_t i = 0; i < files.size(); ++i) {
    const std::optional<SpeedCounters> c = ReadSpeedCounters(files[i]);
    if (!c.has_value()) continue;
    v1::RankSpeedSample* s = heartbeat->add_speeds();
    s->set_rank(rank_offset + static_cast<int>(i));
    s->set_collectives(c->finished);
    s->set_compute_us(c->compute_us);
    s->set_wait_us(c->wait_us);
  }
}

}  // namespace muster::agent
