#include "tests/testing/musterd.h"

#include <utility>

#include "tests/testing/ports.h"

namespace muster::testing {

MusterdProcess::MusterdProcess(int port, std::vector<std::string> flags)
    : port_(port), flags_(std::move(flags)) {
  Start();
}

bool MusterdProcess::Start(absl::Duration timeout) {
  std::vector<std::string> argv = {BinPath("musterd"),
                                   "--listen=" + endpoint()};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  proc_ = std::make_unique<Subprocess>(argv);
  ready_ = proc_->WaitForOutput("listening", timeout);
  return ready_;
}

std::string MusterdProcess::endpoint() const { return LoopbackEndpoint(port_); }

}  // namespace muster::testing
