// POSIX (Linux) implementation of muster/platform/shared_memory.h: shm_open +
// mmap for the region, futexes on the shared words (not FUTEX_PRIVATE: the
// waiters are in other processes), kill(pid, 0) for liveness.
#include "muster/platform/shared_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace muster::platform {
namespace {

absl::Status OsError(absl::StatusCode code, absl::string_view what,
                     const std::string& name, int error) {
  return absl::Status(code, absl::StrCat(what, " shared memory ", name, ": ",
                                         std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                          S_IRUSR | S_IWUSR);
  if (fd < 0) {
    const int e = errno;
    return OsError(e == EEXIST ? absl::StatusCode::kAlreadyExists
                               : absl::StatusCode::kUnavailable,
                   "creating", name, e);
  }
  // posix_fallocate, not only ftruncate: tmpfs then reserves the pages now
  // and a full /dev/shm is an error here, not a SIGBUS in a collective.
  int e = 0;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    e = errno;
  } else {
    e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  }
  if (e != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return OsError(
        absl::StatusCode::kUnavailable,
        absl::StrCat("sizing (", bytes, " bytes; is /dev/shm full?)"), name, e);
  }
  // MAP_POPULATE: fault the pages in now, not inside the first collective.
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd, 0);
  e = errno;
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(name.c_str());
    return OsError(absl::StatusCode::kUnavailable, "mapping", name, e);
  }
  return std::unique_ptr<SharedRegion>(new SharedRegion(name, data, bytes));
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Open(
    const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    const int e = errno;
    return OsError(e == ENOENT ? absl::StatusCode::kNotFound
                               : absl::StatusCode::kUnavailable,
                   "opening", name, e);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " has ", st.st_size,
                     " bytes, not the ", bytes, " expected"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  close(fd);
  if (data == MAP_FAILED) {
    return OsError(absl::StatusCode::kUnavailable, "mapping", name, e);
  }
  return std::unique_ptr<SharedRegion>(new SharedRegion(name, data, bytes));
}

SharedRegion::~SharedRegion() { munmap(data_, size_); }

void SharedRegion::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  shm_unlink(name_.c_str());
}

void WaitOnWord(std::atomic<uint32_t>* word, uint32_t expected,
                absl::Duration timeout) {
  struct timespec ts = absl::ToTimespec(timeout);
  // std::atomic<uint32_t> is a plain 32-bit word (static_assert in the
  // transport): the futex works on its address.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
          &ts, nullptr, 0);
}

void WakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX,
          nullptr, nullptr, 0);
}

void YieldThread() { sched_yield(); }

bool ProcessExists(int64_t pid) {
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  // A process that ended but was not reaped yet (a zombie) still answers
  // kill(pid, 0): its state in /proc says it is gone.
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return true;  // No /proc: trust kill.
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ||
         (stat[paren + 2] != 'Z' && stat[paren + 2] != 'X');
}

std::string HostIdentity() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return absl::StrCat(host, "/", absl::StripAsciiWhitespace(boot));
}

std::string UniqueRegionName() {
  std::random_device device;
  const uint64_t bits =
      (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
  return absl::StrFormat("/muster-%d-%016x", getpid(), bits);
}

}  // namespace muster::platform
