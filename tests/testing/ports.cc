#include "tests/testing/ports.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace muster::testing {

std::string LoopbackEndpoint(int port) {
  return absl::StrCat("127.0.0.1:", port);
}

int ReadPortFile(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  int port = 0;
  if (f && std::getline(f, text) && absl::SimpleAtoi(text, &port) && port > 0)
    return port;
  return 0;
}

}  // namespace muster::testing
