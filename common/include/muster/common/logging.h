// The logger lives in the platform layer (muster/platform/logging.h), the
// bottom of the tree, so that every module, platform/ included, logs the same
// way. This header keeps the name every module includes.
#ifndef MUSTER_COMMON_LOGGING_H_
#define MUSTER_COMMON_LOGGING_H_

#include "muster/platform/logging.h"

#endif  // MUSTER_COMMON_LOGGING_H_
