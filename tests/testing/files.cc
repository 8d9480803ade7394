#include "tests/testing/files.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace muster::testing {

std::string WriteFile(const std::string& path, const std::string& text,
                      int mode) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  chmod(path.c_str(), static_cast<mode_t>(mode));
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace muster::testing
