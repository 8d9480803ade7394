#include "muster/platform/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/clock.h"
#include "muster/platform/env.h"

namespace muster {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("MUSTER_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  std::string s = absl::AsciiStrToLower(v);
  if (s == "debug") return LogLevel::kDebug;
  if (s == "warning" || s == "warn") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

struct SinkState {
  absl::Mutex mu;
  std::string tag ABSL_GUARDED_BY(mu) = "muster";
  std::function<void(LogLevel, const std::string&)> sink ABSL_GUARDED_BY(mu);
};

SinkState& State() {
  static SinkState* state = new SinkState();
  return *state;
}

char LevelChar(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 'D';
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}

}  // namespace

void SetMinLogLevel(LogLevel level) {
  MinLevel().store(static_cast<int>(level));
}
LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevel().load()); }

void SetLogTag(absl::string_view tag) {
  SinkState& s = State();
  absl::MutexLock lock(&s.mu);
  s.tag = std::string(tag);
}

void SetLogSink(std::function<void(LogLevel, const std::string&)> sink) {
  SinkState& s = State();
  absl::MutexLock lock(&s.mu);
  s.sink = std::move(sink);
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level) {
  (void)file;
  (void)line;
}

LogMessage::~LogMessage() {
  SinkState& s = State();
  std::string body = stream_.str();
  absl::MutexLock lock(&s.mu);
  if (s.sink) {
    s.sink(level_, body);
    return;
  }
  std::string line = absl::FormatTime("%H:%M:%E3S", Clock::Real()->Now(),
                                      absl::LocalTimeZone());
  line += ' ';
  line += LevelChar(level_);
  line += " [";
  line += s.tag;
  line += "] ";
  line += body;
  line += '\n';
  // One write() per line, so lines from several threads or processes never
  // interleave.
  platform::WriteToStderr(line);
}

}  // namespace internal
}  // namespace muster
