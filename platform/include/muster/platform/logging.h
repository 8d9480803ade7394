// A small line logger. Abseil 20220623 has no absl/log, and muster needs
// little: one line per event, written whole (never torn by another thread),
// with a time, a level and a tag.
//
//   MUSTER_LOG(INFO) << "round " << n << " ready";
//
// Thread-safe. Lines go to stderr unless SetLogSink says otherwise.
#ifndef MUSTER_PLATFORM_LOGGING_H_
#define MUSTER_PLATFORM_LOGGING_H_

#include <functional>
#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace muster {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo;
// MUSTER_LOG_LEVEL=debug|info|warning|error sets it at start-up.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

// The tag printed on every line, such as "muster" or "musterd". Default:
// "muster".
void SetLogTag(absl::string_view tag);

// Replaces where finished lines go (tests capture them). nullptr restores
// stderr.
void SetLogSink(std::function<void(LogLevel, const std::string&)> sink);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
// Swallows the stream when the level is off.
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal
}  // namespace muster

#define MUSTER_LOG_LEVEL_DEBUG ::muster::LogLevel::kDebug
#define MUSTER_LOG_LEVEL_INFO ::muster::LogLevel::kInfo
#define MUSTER_LOG_LEVEL_WARNING ::muster::LogLevel::kWarning
#define MUSTER_LOG_LEVEL_ERROR ::muster::LogLevel::kError

#define MUSTER_LOG(level)                                                      \
  (MUSTER_LOG_LEVEL_##level < ::muster::MinLogLevel())                         \
      ? (void)0                                                                \
      : ::muster::internal::LogVoidify() &                                     \
            ::muster::internal::LogMessage(MUSTER_LOG_LEVEL_##level, __FILE__, \
                                           __LINE__)                           \
                .stream()

// As MUSTER_LOG, at a level chosen at run time (a ::muster::LogLevel value).
#define MUSTER_LOG_AT(level_value)                                            \
  ((level_value) < ::muster::MinLogLevel())                                   \
      ? (void)0                                                               \
      : ::muster::internal::LogVoidify() &                                    \
            ::muster::internal::LogMessage((level_value), __FILE__, __LINE__) \
                .stream()

#endif  // MUSTER_PLATFORM_LOGGING_H_
