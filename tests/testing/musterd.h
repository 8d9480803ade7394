// musterd as a child process for end-to-end tests.
#ifndef MUSTER_TESTS_TESTING_MUSTERD_H_
#define MUSTER_TESTS_TESTING_MUSTERD_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/subprocess.h"

namespace muster::testing {

// The `musterd` binary listening on 127.0.0.1:<port> (a free port unless
// given), with `flags` after --listen. Started by the constructor; Start()
// starts it again on the same port (after proc().Kill(), say). The process
// group is killed when the object goes away. Not thread-safe.
class MusterdProcess {
 public:
  explicit MusterdProcess(int port = FreePort(),
                          std::vector<std::string> flags = {});

  // Starts musterd and waits up to `timeout` until it says it is listening;
  // returns ready().
  bool Start(absl::Duration timeout = absl::Seconds(30));
  // Whether the last Start saw it serve.
  bool ready() const { return ready_; }
  int port() const { return port_; }
  // "127.0.0.1:<port>", for --rdzv-endpoint.
  std::string endpoint() const;
  Subprocess& proc() { return *proc_; }

 private:
  const int port_;
  const std::vector<std::string> flags_;
  std::unique_ptr<Subprocess> proc_;
  bool ready_ = false;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_MUSTERD_H_
