// Stop requests: how the operating system asks a muster program to stop.
// Today SIGTERM / SIGINT / SIGHUP / SIGQUIT (any set of signals); on Windows,
// Ctrl-C / Ctrl-Break and a service stop, delivered as the same numbers
// (platform/signals.h). Nothing runs in a signal handler: the signals are
// blocked in every thread and taken by one waiting thread.
#ifndef MUSTER_PLATFORM_STOP_REQUESTS_H_
#define MUSTER_PLATFORM_STOP_REQUESTS_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace muster::platform {

// Where stop requests come from: the OS (StopRequests below) or a test
// (platform/fake/fake_stop_requests.h). Code that only waits for requests
// takes this.
class StopRequestSource {
 public:
  virtual ~StopRequestSource() = default;

  // Blocks until a stop request arrives and returns its signal number.
  virtual int Wait() = 0;

  // Starts a thread that calls `on_stop(signal)` for every request that
  // arrives, until this object is destroyed. At most once.
  virtual void StartWatcher(std::function<void(int)> on_stop) = 0;
};

// The OS's stop requests. Not thread-safe: one owner (the main thread).
class StopRequests final : public StopRequestSource {
 public:
  // Blocks `signals` in the calling thread, so that every thread started
  // afterwards inherits the mask. Call before any other thread starts.
  // Processes started through ProcessLauncher get a clean mask back.
  explicit StopRequests(std::vector<int> signals);
  // Ends the watcher thread, if any. The signals stay blocked.
  ~StopRequests() override;
  StopRequests(const StopRequests&) = delete;
  StopRequests& operator=(const StopRequests&) = delete;

  // Blocks until one of the signals arrives and returns it.
  int Wait() override;

  // Starts a thread that calls `on_stop(signal)` for every signal that
  // arrives, until this object is destroyed. At most once.
  void StartWatcher(std::function<void(int)> on_stop) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::thread watcher_;
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_STOP_REQUESTS_H_
