// Small POSIX helpers of the process launcher: an owned descriptor, whole
// writes, errno text, and the signal mask of helper threads. Private to
// platform/posix.
#ifndef MUSTER_PLATFORM_POSIX_FD_H_
#define MUSTER_PLATFORM_POSIX_FD_H_

#include <cstddef>
#include <string>
#include <utility>

namespace muster::platform::posix {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

std::string ErrnoText(int err);

// Writes all of `data`, retrying on EINTR, short writes and (for a descriptor
// someone made non-blocking) EAGAIN. Returns false on a real error (EPIPE,
// ENOSPC, ...), errno set.
bool WriteAll(int fd, const char* data, size_t size);

// Blocks every asynchronous signal in the calling (helper) thread:
// process-directed signals are for the program's own threads, and a SIGPIPE
// from writing to a closed console pipe becomes EPIPE.
void BlockSignalsInThisThread();

}  // namespace muster::platform::posix

#endif  // MUSTER_PLATFORM_POSIX_FD_H_
