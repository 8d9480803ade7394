// Private to platform: the check both OSes' WriteFileAtomically make first.
#ifndef MUSTER_PLATFORM_SRC_REPLACEABLE_H_
#define MUSTER_PLATFORM_SRC_REPLACEABLE_H_

#include <string>

#include "absl/status/status.h"

namespace muster::platform::internal {

// FAILED_PRECONDITION naming what `path` is when it exists and is not a
// regular file (a FIFO, a directory...): replacing it would write through, or
// over, something that is not ours.
absl::Status CheckReplaceable(const std::string& path);

}  // namespace muster::platform::internal

#endif  // MUSTER_PLATFORM_SRC_REPLACEABLE_H_
