// Forwarding header for the files of comm that others are reshaping now
// (init.cc, shm/shm_backend.cc, gloo/gloo_communicator.cc): the OS calls moved
// to platform/ (comm/src/os.h). Goes away once those include comm/src/os.h.
#ifndef MUSTER_COMM_GLOO_BROKEN_PIPE_H_
#define MUSTER_COMM_GLOO_BROKEN_PIPE_H_

#include "comm/src/os.h"

#endif  // MUSTER_COMM_GLOO_BROKEN_PIPE_H_
