// libmuster_comm in one include: communicators, element types, the progress
// heartbeat. C programs include muster/comm/c_api.h instead.
#ifndef MUSTER_COMM_COMM_H_
#define MUSTER_COMM_COMM_H_

#include "muster/comm/communicator.h"  // IWYU pragma: export
#include "muster/comm/progress.h"      // IWYU pragma: export
#include "muster/comm/types.h"         // IWYU pragma: export

#endif  // MUSTER_COMM_COMM_H_
