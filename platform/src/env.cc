// The portable part of muster/platform/env.h: the C runtime's view of the
// environment (the same on every OS).
#include "muster/platform/env.h"

#include <cstdlib>

namespace muster::platform {

const char* NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

}  // namespace muster::platform
