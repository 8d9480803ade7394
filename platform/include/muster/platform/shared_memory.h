// The operating-system calls of the shared-memory transport, behind a small
// interface: a named shared region, waiting on a 32-bit word in it, process
// liveness and the host's identity. posix/shared_memory.cc implements it
// with shm_open/mmap and futexes; windows/shared_memory_windows.cc with
// CreateFileMapping (WaitOnAddress cannot cross processes there).
#ifndef MUSTER_PLATFORM_SHARED_MEMORY_H_
#define MUSTER_PLATFORM_SHARED_MEMORY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/platform/host.h"

namespace muster::platform {

// A region of memory shared between processes, found by name. The mapping
// lives until the object is destroyed, whether or not the name still exists.
// Not thread-safe (one owner); the memory itself is shared by design.
class SharedRegion {
 public:
  // Creates a new region of `bytes` bytes (zeroed) under `name`, readable
  // and writable by this user only. Errors: ALREADY_EXISTS when the name is
  // taken, UNAVAILABLE naming the OS error (e.g. /dev/shm full).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(
      const std::string& name, size_t bytes);
  // Maps the existing region `name`, which must be `bytes` bytes long.
  // Errors: NOT_FOUND, FAILED_PRECONDITION (size differs), UNAVAILABLE.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Open(
      const std::string& name, size_t bytes);

  ~SharedRegion();  // Unmaps.
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // Removes the name; the mappings stay valid. Idempotent, never blocks.
  void Unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  SharedRegion(std::string name, void* data, size_t size)
      : name_(std::move(name)), data_(data), size_(size) {}
  const std::string name_;
  void* const data_;
  const size_t size_;
  bool unlinked_ = false;
};

// Sleeps while *word == expected, for at most `timeout`; returns early when
// WakeAll(word) is called (from any process sharing the word) or spuriously.
// Callers re-check their condition.
void WaitOnWord(std::atomic<uint32_t>* word, uint32_t expected,
                absl::Duration timeout);
// Wakes every thread of every process waiting on `word`.
void WakeAll(std::atomic<uint32_t>* word);

// Lets another thread run (a step of spin-then-wait). Not named Yield:
// <windows.h> defines Yield() as a macro that expands to nothing (a Win16
// relic), which would erase the declaration wherever both are included.
void YieldThread();

// This process's id: CurrentProcessId() in muster/platform/host.h.
// Whether process `pid` (of this host) still runs: false when the OS says
// there is no such process, or that it has ended and awaits its parent
// (a zombie).
bool ProcessExists(int64_t pid);

// What tells this host from others: the host name and the kernel's boot id
// ("node7/6f1c..."), so that a host name reused by another machine, or the
// same machine rebooted, never counts as the same host.
std::string HostIdentity();

// A name no other region has: "/muster-<pid>-<64 random bits in hex>".
std::string UniqueRegionName();

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_SHARED_MEMORY_H_
