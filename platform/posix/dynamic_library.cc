// POSIX implementation of muster/platform/dynamic_library.h: dlopen, dlsym,
// dladdr.
#include "muster/platform/dynamic_library.h"

#include <dlfcn.h>
#include <unistd.h>

namespace muster::platform {

absl::StatusOr<DynamicLibrary> DynamicLibrary::Load(const std::string& name) {
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    return absl::NotFoundError(e != nullptr ? e : "not found");
  }
  return DynamicLibrary(handle);
}

void* DynamicLibrary::Symbol(const char* symbol) const {
  return dlsym(handle_, symbol);
}

std::string LibraryPathOf(const void* address) {
  Dl_info info;
  if (address != nullptr && dladdr(address, &info) != 0 &&
      info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "";
}

bool RunningAsAdministrator() { return geteuid() == 0; }

}  // namespace muster::platform
