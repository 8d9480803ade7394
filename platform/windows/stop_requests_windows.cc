// StopRequests on Windows: SetConsoleCtrlHandler (Ctrl-C, Ctrl-Break, the
// console closing, log-off, shutdown) and the service manager's stop, queued
// as the signal numbers of signals.h and taken by one waiting thread.
#include <windows.h>

#include <algorithm>
#include <deque>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "muster/platform/signals.h"
#include "muster/platform/stop_requests.h"
#include "platform/windows/stop_post.h"

namespace muster::platform {
namespace windows {
namespace {

struct Queue {
  absl::Mutex mu;
  std::deque<int> pending ABSL_GUARDED_BY(mu);
  std::vector<int> wanted ABSL_GUARDED_BY(mu);
  // The owner is going away: Wait returns 0.
  bool quit ABSL_GUARDED_BY(mu) = false;
  // Set when a StopRequests is destroyed (its owner finished stopping).
  bool finished ABSL_GUARDED_BY(mu) = false;
};

Queue& TheQueue() {
  static Queue* q = new Queue();
  return *q;
}

}  // namespace

int SignalOfCtrlEvent(DWORD ctrl_type) {
  switch (ctrl_type) {
    case CTRL_C_EVENT:
      return kSignalInterrupt;
    case CTRL_BREAK_EVENT:
      return kSignalTerminate;
    case CTRL_CLOSE_EVENT:
      return kSignalHangup;
    case CTRL_LOGOFF_EVENT:
    case CTRL_SHUTDOWN_EVENT:
      return kSignalTerminate;
    default:
      return 0;
  }
}

bool PostStopRequest(int signal, bool always) {
  Queue& q = TheQueue();
  absl::MutexLock lock(&q.mu);
  if (!always &&
      std::find(q.wanted.begin(), q.wanted.end(), signal) == q.wanted.end()) {
    return false;
  }
  q.pending.push_back(signal);
  return true;
}

BOOL WINAPI ConsoleCtrlHandler(DWORD ctrl_type) {
  const int signal = SignalOfCtrlEvent(ctrl_type);
  if (signal == 0 || !PostStopRequest(signal, /*always=*/false)) return FALSE;
  if (ctrl_type == CTRL_CLOSE_EVENT || ctrl_type == CTRL_LOGOFF_EVENT ||
      ctrl_type == CTRL_SHUTDOWN_EVENT) {
    // Windows ends the process when this returns: give the drain its time
    // (the system allows about 5 s).
    Queue& q = TheQueue();
    absl::MutexLock lock(&q.mu);
    q.mu.AwaitWithTimeout(absl::Condition(&q.finished), absl::Seconds(4));
  }
  return TRUE;
}

}  // namespace windows

struct StopRequests::State {};

StopRequests::StopRequests(std::vector<int> signals)
    : state_(std::make_unique<State>()) {
  windows::Queue& q = windows::TheQueue();
  const bool wants_interrupt = std::find(signals.begin(), signals.end(),
                                         kSignalInterrupt) != signals.end();
  {
    absl::MutexLock lock(&q.mu);
    q.wanted = std::move(signals);
    q.quit = false;
    q.finished = false;
  }
  // A process started in a new console process group (as the launcher starts
  // its workers) has Ctrl-C turned off; take it back when it is asked for.
  if (wants_interrupt) SetConsoleCtrlHandler(nullptr, FALSE);
  SetConsoleCtrlHandler(windows::ConsoleCtrlHandler, TRUE);
}

StopRequests::~StopRequests() {
  windows::Queue& q = windows::TheQueue();
  {
    absl::MutexLock lock(&q.mu);
    q.quit = true;
    q.finished = true;
    q.wanted.clear();
  }
  if (watcher_.joinable()) watcher_.join();
  SetConsoleCtrlHandler(windows::ConsoleCtrlHandler, FALSE);
  absl::MutexLock lock(&q.mu);
  q.pending.clear();
}

int StopRequests::Wait() {
  windows::Queue& q = windows::TheQueue();
  absl::MutexLock lock(&q.mu);
  auto ready = [&q]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(q.mu) {
    return !q.pending.empty() || q.quit;
  };
  q.mu.Await(absl::Condition(&ready));
  if (q.pending.empty()) return 0;
  const int signal = q.pending.front();
  q.pending.pop_front();
  return signal;
}

void StopRequests::StartWatcher(std::function<void(int)> on_stop) {
  if (watcher_.joinable()) return;
  watcher_ = std::thread([this, on_stop = std::move(on_stop)] {
    while (true) {
      const int signal = Wait();
      if (signal == 0) return;
      on_stop(signal);
    }
  });
}

}  // namespace muster::platform
