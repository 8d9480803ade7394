// POSIX implementation of muster/platform/broken_pipe.h: SIGPIPE ignored when
// its disposition is still the default.
#include "muster/platform/broken_pipe.h"

#include <signal.h>

#include <mutex>

#include "muster/platform/logging.h"

namespace muster::platform {

void IgnoreBrokenPipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current;
    if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
    if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
      MUSTER_LOG(DEBUG) << "SIGPIPE is now ignored: a lost peer fails a "
                           "collective instead of killing this process";
    }
  });
}

}  // namespace muster::platform
