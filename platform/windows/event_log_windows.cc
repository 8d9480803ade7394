// The event log on Windows: the Application log, through an event source
// (RegisterEventSourceW / ReportEventW). Each event carries one insertion
// string, the message, and the id of a message whose text is just "%1"
// (event_messages.mc, compiled into musterd.exe), so the Event Viewer shows
// the message as it is. Under wine there is no event log: ReportEventW prints
// each string on the `eventlog` debug channel (WINEDEBUG=+eventlog).
#include <windows.h>

#include "muster/platform/event_log.h"
#include "platform/windows/win_util.h"

namespace muster::platform {
namespace {

// The message ids of event_messages.mc: severity in the top two bits, then
// the MessageId (Informational 1, Warning 2, Error 3).
constexpr DWORD kMessageInformation = 0x40000001;
constexpr DWORD kMessageWarning = 0x80000002;
constexpr DWORD kMessageError = 0xC0000003;

class WindowsEventLog final : public EventLog {
 public:
  explicit WindowsEventLog(HANDLE source) : source_(source) {}
  ~WindowsEventLog() override { DeregisterEventSource(source_); }
  WindowsEventLog(const WindowsEventLog&) = delete;
  WindowsEventLog& operator=(const WindowsEventLog&) = delete;

  void Report(EventKind kind, absl::string_view message) override {
    const std::wstring text = windows::Widen(message);
    LPCWSTR strings[] = {text.c_str()};
    WORD type = EVENTLOG_INFORMATION_TYPE;
    DWORD id = kMessageInformation;
    if (kind == EventKind::kWarning) {
      type = EVENTLOG_WARNING_TYPE;
      id = kMessageWarning;
    } else if (kind == EventKind::kError) {
      type = EVENTLOG_ERROR_TYPE;
      id = kMessageError;
    }
    // The handle is thread-safe; a full or missing log is not our failure.
    ReportEventW(source_, type, /*wCategory=*/0, id, /*lpUserSid=*/nullptr,
                 /*wNumStrings=*/1, /*dwDataSize=*/0, strings,
                 /*lpRawData=*/nullptr);
  }

 private:
  const HANDLE source_;
};

}  // namespace

std::unique_ptr<EventLog> EventLog::Open(const std::string& source) {
  HANDLE h = RegisterEventSourceW(nullptr, windows::Widen(source).c_str());
  if (h == nullptr) return nullptr;
  return std::make_unique<WindowsEventLog>(h);
}

}  // namespace muster::platform
