// The operating system as libmuster_comm sees it: platform's sockets, host
// facts, locked and mapped files, shared memory and broken-pipe handling
// (muster/platform/*.h), under the short names comm's code uses in
// muster::comm::internal. No OS header and no OS call in comm/ itself.
#ifndef MUSTER_COMM_SRC_OS_H_
#define MUSTER_COMM_SRC_OS_H_

#include "muster/platform/broken_pipe.h"
#include "muster/platform/host.h"
#include "muster/platform/locked_file.h"
#include "muster/platform/shared_memory.h"
#include "muster/platform/socket.h"

namespace muster::comm::internal {

// muster/platform/socket.h
using platform::Accept;
using platform::ConnectTcp;
using platform::ConstBuffer;
using platform::IoResult;
using platform::kNoSocket;
using platform::ListenTcp;
using platform::PollMs;
using platform::PollSet;
using platform::Socket;
using platform::SocketHandle;
using platform::Wakeup;
// muster/platform/host.h
using platform::CurrentProcessId;
using platform::ListNetworkInterfaces;
using platform::NetworkInterface;
using platform::ProcessRuns;
using platform::ProcessStartToken;
using platform::ResolveHost;
// muster/platform/locked_file.h
using platform::AbsolutePathFromUri;
using platform::LockedFile;
using platform::MappedFile;
// muster/platform/broken_pipe.h
using platform::IgnoreBrokenPipeUnlessHandled;

namespace shm {
// muster/platform/shared_memory.h
using platform::CurrentProcessId;
using platform::HostIdentity;
using platform::ProcessExists;
using platform::SharedRegion;
using platform::UniqueRegionName;
using platform::WaitOnWord;
using platform::WakeAll;
using platform::YieldThread;
}  // namespace shm

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_OS_H_
