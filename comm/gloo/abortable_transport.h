// AbortableTransport: Gloo's transport context, wrapped so that libmuster_comm
// can fail every operation of a mesh at once, through Gloo's own API.
//
// A rank must stop waiting the moment a peer is known to be dead (the peer
// monitor's verdict) or its own operation failed, and its live peers must stop
// waiting for it too. Gloo has two mechanisms, and each misses a case:
//
//  * A pair that fails (its socket read EOF, or the context is told of an
//    application timeout) signals every bound buffer and every posted send or
//    receive of that pair, closes its socket (so the peer reads EOF), and
//    fails every later operation. But a receive into an unbound buffer whose
//    payload is half read when the pair fails is in neither list (Gloo keeps
//    it only in the pair's read state), so its waiter sleeps until the
//    collective's timeout. That was the missed abort of the 4-rank kill test:
//    "shut down 6 of 6 pair sockets", and the survivor still waited 30 s.
//  * UnboundBuffer::abortWaitRecv/abortWaitSend wake one buffer's waiter,
//    but Gloo's option-based collectives create their buffers internally.
//
// So this context owns every unbound buffer the collectives create (it is
// the context they create them from) and keeps the live ones in a registry.
// Abort() then (1) marks the context aborted, so that every later wait, send
// or receive throws; (2) wakes every live buffer's waiters, which throw; and
// (3) fails every pair through Gloo's application-timeout path (a zero-length
// wait that times out makes Gloo's context fail all of its pairs), which
// wakes the bound buffers, closes the sockets and tells the peers. Nothing is
// found by scanning, and a buffer created after (1) throws on first use.
//
// On Gloo's libuv transport (Windows, gloo_device.h) a timed-out wait fails
// only itself and a pair that reads EOF wakes none of its waiters, so (1) and
// (2) are what stop the waiters there, and (3) closes every pair instead
// (Pair::close: the peers read EOF). A dead peer is found by the peer
// monitor on both transports, never by Gloo.
//
// Thread-safe. Install it right after connectFullMesh (Install).
#ifndef MUSTER_COMM_GLOO_ABORTABLE_TRANSPORT_H_
#define MUSTER_COMM_GLOO_ABORTABLE_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "gloo/transport/context.h"
#include "gloo/transport/unbound_buffer.h"

namespace muster::comm::internal {

class AbortableTransport final : public ::gloo::transport::Context {
 public:
  explicit AbortableTransport(
      std::shared_ptr<::gloo::transport::Context> inner);
  ~AbortableTransport() override;

  // The pairs are the inner context's: their failures are Gloo's own.
  std::unique_ptr<::gloo::transport::Pair>& getPair(int rank) override;
  std::unique_ptr<::gloo::transport::Pair>& createPair(int rank) override;

  // An unbound buffer of the inner context, registered until destroyed.
  std::unique_ptr<::gloo::transport::UnboundBuffer> createUnboundBuffer(
      void* ptr, size_t size) override;

  // Fails every waiting, pending and later operation of this context (see
  // the file comment). Returns when every pair has failed. Idempotent.
  void Abort();

  bool aborted() const;

 private:
  class Buffer;
  // A wait on one of this context's buffers threw (timed out): aborts the
  // context where Gloo's transport does not fail it itself (libuv).
  void AbortAfterTimeout();
  void Forget(Buffer* buffer);
  // Throws gloo::IoException when aborted.
  void ThrowIfAborted() const;

  const std::shared_ptr<::gloo::transport::Context> inner_;
  mutable absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<Buffer*> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_ABORTABLE_TRANSPORT_H_
