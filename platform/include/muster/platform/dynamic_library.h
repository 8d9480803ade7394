// Shared libraries loaded at run time: the doctor's look at the GPU driver
// (libcuda.so.1) and NCCL (libnccl.so.2) without linking either.
// posix/dynamic_library.cc (dlopen), windows/dynamic_library_windows.cc
// (LoadLibrary).
#ifndef MUSTER_PLATFORM_DYNAMIC_LIBRARY_H_
#define MUSTER_PLATFORM_DYNAMIC_LIBRARY_H_

#include <string>

#include "absl/status/statusor.h"

namespace muster::platform {

// A loaded library, never unloaded: unloading a driver library that started
// threads is unsafe, and the callers exit soon. Copyable (a handle).
class DynamicLibrary {
 public:
  // Loads `name` by the OS's search rules. Errors: NOT_FOUND with the
  // loader's message ("libcuda.so.1: cannot open shared object file ...").
  static absl::StatusOr<DynamicLibrary> Load(const std::string& name);

  // The address of `symbol`; nullptr when the library has none.
  void* Symbol(const char* symbol) const;
  // The function `symbol` as a pointer of type F; nullptr when absent.
  template <typename F>
  F Function(const char* symbol) const {
    return reinterpret_cast<F>(Symbol(symbol));
  }

 private:
  explicit DynamicLibrary(void* handle) : handle_(handle) {}
  void* handle_;
};

// The path of the loaded library that holds `address`; "" when unknown.
std::string LibraryPathOf(const void* address);

// Whether this process runs with the administrator's rights (root on Linux,
// an elevated token on Windows): a firewall can then be read completely.
bool RunningAsAdministrator();

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_DYNAMIC_LIBRARY_H_
