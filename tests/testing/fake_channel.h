// FakeChannel: an AgentChannel that records what the Coordinator sends and how
// it ends the stream, for the Coordinator's unit tests (no gRPC, no threads of
// its own). It keeps the channel's contract: what is sent after Close is
// dropped (and counted, since the Coordinator should not try).
#ifndef MUSTER_TESTS_TESTING_FAKE_CHANNEL_H_
#define MUSTER_TESTS_TESTING_FAKE_CHANNEL_H_

#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::testing {

class FakeChannel : public rendezvous::AgentChannel {
 public:
  using Kind = v1::ServerMessage::KindCase;

  void Send(const v1::ServerMessage& msg) override {
    absl::MutexLock lock(&mu_);
    if (closed_.has_value()) {
      ++sends_after_close_;
      return;
    }
    messages_.push_back(msg);
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    ++close_calls_;
    if (!closed_.has_value()) closed_ = status;
  }

  std::vector<v1::ServerMessage> messages() const {
    absl::MutexLock lock(&mu_);
    return messages_;
  }
  size_t size() const { return messages().size(); }
  // The last message; a default one when there is none.
  v1::ServerMessage last() const {
    auto m = messages();
    return m.empty() ? v1::ServerMessage() : m.back();
  }
  // How many messages of `kind` it was sent.
  int count(Kind kind) const {
    int n = 0;
    for (const auto& m : messages()) n += m.kind_case() == kind;
    return n;
  }
  // The status of the first Close; empty while the stream is open.
  std::optional<absl::Status> closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  int close_calls() const {
    absl::MutexLock lock(&mu_);
    return close_calls_;
  }
  int sends_after_close() const {
    absl::MutexLock lock(&mu_);
    return sends_after_close_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::ServerMessage> messages_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
  int close_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int sends_after_close_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_FAKE_CHANNEL_H_
