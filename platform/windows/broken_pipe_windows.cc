// Windows implementation of muster/platform/broken_pipe.h: Windows has no
// SIGPIPE (a send on a closed connection fails with an error), so nothing to
// do.
#include "muster/platform/broken_pipe.h"

namespace muster::platform {

void IgnoreBrokenPipeUnlessHandled() {}

}  // namespace muster::platform
