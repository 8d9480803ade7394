#include "comm/gloo/abortable_transport.h"

#include <chrono>
#include <utility>
#include <vector>

#include "comm/gloo/gloo_device.h"
#include "gloo/common/error.h"
#include "gloo/transport/pair.h"

namespace muster::comm::internal {

// Forwards to the inner buffer; throws once the context is aborted.
class AbortableTransport::Buffer final
    : public ::gloo::transport::UnboundBuffer {
 public:
  Buffer(AbortableTransport* owner,
         std::unique_ptr<::gloo::transport::UnboundBuffer> inner)
      : UnboundBuffer(inner->ptr, inner->size),
        owner_(owner),
        inner_(std::move(inner)) {}

  // Unregisters first, so Abort never touches a buffer being destroyed.
  ~Buffer() override {
    owner_->Forget(this);
    if (!GlooHasBoundBuffers() && owner_->aborted()) {
      // Gloo's libuv buffer, when destroyed, spins until every pending
      // operation of its pairs that refers to it is dropped, and a pair closed
      // by a dead peer or by Abort never drops them: destroying it would spin
      // forever (a survivor of a killed rank never reported the loss). Leak
      // it, and the dead context it refers to: every pair is closed, so no
      // more bytes arrive for it.
      static_cast<void>(inner_.release());
    }
  }

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    owner_->ThrowIfAborted();
    bool done = false;
    try {
      done = inner_->waitRecv(rank, timeout);
    } catch (const ::gloo::Exception&) {
      owner_->AbortAfterTimeout();
      throw;
    }
    // false: Abort woke this wait (nobody else calls abortWaitRecv).
    if (!done) owner_->ThrowIfAborted();
    return done;
  }

  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    owner_->ThrowIfAborted();
    bool done = false;
    try {
      done = inner_->waitSend(rank, timeout);
    } catch (const ::gloo::Exception&) {
      owner_->AbortAfterTimeout();
      throw;
    }
    if (!done) owner_->ThrowIfAborted();
    return done;
  }

  void abortWaitRecv() override { inner_->abortWaitRecv(); }
  void abortWaitSend() override { inner_->abortWaitSend(); }

  void send(int dst_rank, uint64_t slot, size_t offset,
            size_t nbytes) override {
    owner_->ThrowIfAborted();
    inner_->send(dst_rank, slot, offset, nbytes);
  }

  void recv(int src_rank, uint64_t slot, size_t offset,
            size_t nbytes) override {
    owner_->ThrowIfAborted();
    inner_->recv(src_rank, slot, offset, nbytes);
  }

  void recv(std::vector<int> src_ranks, uint64_t slot, size_t offset,
            size_t nbytes) override {
    owner_->ThrowIfAborted();
    inner_->recv(std::move(src_ranks), slot, offset, nbytes);
  }

  ::gloo::transport::UnboundBuffer& inner() { return *inner_; }

 private:
  AbortableTransport* const owner_;
  std::unique_ptr<::gloo::transport::UnboundBuffer> inner_;
};

AbortableTransport::AbortableTransport(
    std::shared_ptr<::gloo::transport::Context> inner)
    : ::gloo::transport::Context(inner->rank, inner->size),
      inner_(std::move(inner)) {
  setTimeout(inner_->getTimeout());
}

AbortableTransport::~AbortableTransport() = default;

std::unique_ptr<::gloo::transport::Pair>& AbortableTransport::getPair(
    int rank) {
  return inner_->getPair(rank);
}

std::unique_ptr<::gloo::transport::Pair>& AbortableTransport::createPair(
    int rank) {
  return inner_->createPair(rank);
}

std::unique_ptr<::gloo::transport::UnboundBuffer>
AbortableTransport::createUnboundBuffer(void* ptr, size_t size) {
  ThrowIfAborted();
  auto buffer =
      std::make_unique<Buffer>(this, inner_->createUnboundBuffer(ptr, size));
  absl::MutexLock lock(&mu_);
  if (aborted_) {
    // Abort ran between the check above and here: this buffer missed its
    // wake-up, so it must not be used at all.
    throw ::gloo::IoException("aborted");
  }
  live_.insert(buffer.get());
  return buffer;
}

void AbortableTransport::Forget(Buffer* buffer) {
  absl::MutexLock lock(&mu_);
  live_.erase(buffer);
}

void AbortableTransport::ThrowIfAborted() const {
  absl::MutexLock lock(&mu_);
  if (aborted_) throw ::gloo::IoException("aborted by libmuster_comm");
}

void AbortableTransport::AbortAfterTimeout() {
  // Gloo's TCP transport fails the whole context itself when a wait times out;
  // its libuv transport fails only that wait and leaves the operation pending
  // on its pair, where the buffer's destructor would wait for it forever.
  if (!GlooHasBoundBuffers()) Abort();
}

bool AbortableTransport::aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

void AbortableTransport::Abort() {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    // A waiter that is not waiting yet finds the flag set (abortWait* is
    // sticky until the next wait consumes it) or the aborted_ check first.
    for (Buffer* buffer : live_) {
      buffer->inner().abortWaitRecv();
      buffer->inner().abortWaitSend();
    }
  }
  // Gloo's context fails all of its pairs when a wait on one of its unbound
  // buffers times out: a zero-byte buffer with nothing posted, waited on for
  // 1 ms, does exactly that. Every pair's bound buffers and posted operations
  // get the exception, its socket is closed, and its peer reads EOF.
  std::unique_ptr<::gloo::transport::UnboundBuffer> probe =
      inner_->createUnboundBuffer(nullptr, 0);
  try {
    probe->waitRecv(nullptr, std::chrono::milliseconds(1));
  } catch (const ::gloo::Exception&) {
    // Expected: "Timed out waiting 1ms for recv operation to complete".
  }
  if (GlooHasBoundBuffers()) return;
  // Gloo's libuv transport (Windows) has no such path: a timed-out wait
  // fails only itself. Its waiters are awake already (above); closing every
  // pair stops the traffic and makes each peer read EOF.
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    std::unique_ptr<::gloo::transport::Pair>& pair = inner_->getPair(r);
    if (pair != nullptr) pair->close();
  }
}

}  // namespace muster::comm::internal
