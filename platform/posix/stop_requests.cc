// Stop requests on POSIX: the signals are blocked before any thread starts and
// taken with sigwait by one thread; a private real-time signal wakes that
// thread when its owner ends it (every classic signal, SIGUSR1/2 included, may
// be a stop signal).
#include "muster/platform/stop_requests.h"

#include <pthread.h>
#include <signal.h>

#include <utility>

namespace muster::platform {

struct StopRequests::State {
  sigset_t set;
  int wake = 0;
};

StopRequests::StopRequests(std::vector<int> signals)
    : state_(std::make_unique<State>()) {
  state_->wake = SIGRTMIN;
  sigemptyset(&state_->set);
  for (int sig : signals) sigaddset(&state_->set, sig);
  sigset_t blocked = state_->set;
  sigaddset(&blocked, state_->wake);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
}

StopRequests::~StopRequests() {
  if (watcher_.joinable()) {
    pthread_kill(watcher_.native_handle(), state_->wake);
    watcher_.join();
  }
}

int StopRequests::Wait() {
  while (true) {
    int sig = 0;
    if (sigwait(&state_->set, &sig) == 0) return sig;
  }
}

void StopRequests::StartWatcher(std::function<void(int)> on_stop) {
  if (watcher_.joinable()) return;
  sigset_t set = state_->set;
  sigaddset(&set, state_->wake);
  const int wake = state_->wake;
  watcher_ = std::thread([set, wake, on_stop = std::move(on_stop)] {
    while (true) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (sig == wake) return;
      on_stop(sig);
    }
  });
}

}  // namespace muster::platform
