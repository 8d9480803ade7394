// The job keeper on Windows: not needed. Each worker's job object is created
// with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, so the tree dies with the launcher
// however it dies. See README.md.
#include "muster/platform/job_keeper.h"

namespace muster::platform {

absl::Status StartJobKeeper() {
  return absl::UnimplementedError(
      "no job keeper on Windows (job objects end the tree)");
}
const std::string& JobKeeperTag() {
  static const std::string* empty = new std::string();
  return *empty;
}
void KeeperWatchGroup(int) {}
void KeeperForgetGroup(int) {}
bool KeeperRemoveTreeAtExit(const std::string&) { return false; }
int RunJobKeeper(int, const std::string&) { return 0; }

}  // namespace muster::platform
