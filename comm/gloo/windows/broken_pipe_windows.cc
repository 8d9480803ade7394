// Windows implementation of comm/gloo/broken_pipe.h: Windows has no SIGPIPE
// (a send on a closed connection fails with an error), so nothing to do.
#include "comm/gloo/broken_pipe.h"

namespace muster::comm::internal {

void IgnoreBrokenPipeUnlessHandled() {}

}  // namespace muster::comm::internal
