// The system's event log: where a service reports its start, its stop and its
// errors for the administrator. On Windows the Application log, under an
// event source registered in
// HKLM\SYSTEM\CurrentControlSet\Services\EventLog\Application\<source>
// (the MSI registers "muster", with musterd.exe's message table:
// platform/windows/event_messages.mc); on Linux nothing, since the journal
// already keeps a service's stderr. Library muster_platform_service.
#ifndef MUSTER_PLATFORM_EVENT_LOG_H_
#define MUSTER_PLATFORM_EVENT_LOG_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace muster::platform {

// An event's type, as the Application log shows it.
enum class EventKind { kInformation, kWarning, kError };

// Thread-safe.
class EventLog {
 public:
  virtual ~EventLog() = default;

  // Reports one event whose text is `message` (UTF-8). Best effort: a log
  // that cannot take it drops it.
  virtual void Report(EventKind kind, absl::string_view message) = 0;

  // The event log under `source` (Windows: RegisterEventSourceW; its events
  // carry the message ids of event_messages.mc, whose text is the message
  // itself). Null on Linux, and when Windows refuses the source.
  static std::unique_ptr<EventLog> Open(const std::string& source);
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_EVENT_LOG_H_
