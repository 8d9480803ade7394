// The event log on Linux: none. systemd's journal keeps a service's stderr,
// where every log line already goes (journalctl -u musterd).
#include "muster/platform/event_log.h"

namespace muster::platform {

std::unique_ptr<EventLog> EventLog::Open(const std::string&) { return nullptr; }

}  // namespace muster::platform
