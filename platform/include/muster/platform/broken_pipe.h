// Gloo writes to its sockets without MSG_NOSIGNAL, so on POSIX a peer that
// dies mid-collective would kill this process with SIGPIPE (exit 141, no
// message) instead of failing the collective with ABORTED. Python ignores
// SIGPIPE at start-up, which is why PyTorch's Gloo does not meet this; C++
// programs need the same. posix/broken_pipe.cc implements it; Windows
// has no such signal (a failed send is an error there), so its version does
// nothing.
#ifndef MUSTER_PLATFORM_BROKEN_PIPE_H_
#define MUSTER_PLATFORM_BROKEN_PIPE_H_

namespace muster::platform {

// Makes a write to a closed connection an error instead of a fatal signal,
// unless the program installed a handler of its own (left alone). Once per
// process; thread-safe; never blocks.
void IgnoreBrokenPipeUnlessHandled();

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_BROKEN_PIPE_H_
