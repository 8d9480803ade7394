// Raw Gloo: the peer muster-bench measures libmuster_comm against, in the same
// run. A Gloo context of its own, over the device and the store adapter that
// muster's Gloo backend uses (so that only muster's own layers differ), running
// Gloo's algorithms with nothing of muster's in the way. For benchmarks, not
// for workers. Gloo stays out of this header, as out of every public one.
#ifndef MUSTER_COMM_RAW_GLOO_H_
#define MUSTER_COMM_RAW_GLOO_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "muster/store/store.h"

namespace muster::comm {

class RawGloo {
 public:
  // Connects `size` ranks through `store` (keys under "bench/raw/") on the
  // interface of `host`. Errors: UNAVAILABLE with what Gloo threw.
  static absl::StatusOr<std::unique_ptr<RawGloo>> Connect(
      std::shared_ptr<store::Store> store, int rank, int size,
      const std::string& host);
  ~RawGloo();
  RawGloo(const RawGloo&) = delete;
  RawGloo& operator=(const RawGloo&) = delete;

  // One sum-allreduce of data[0..count) by Gloo's `algorithm`, ready to run
  // many times: "ring", "ring_chunked", "halving_doubling", "bcube" (Gloo's
  // algorithm classes, which need bound buffers), "opt_ring", "opt_bcube"
  // (gloo::allreduce with options). Errors: INVALID_ARGUMENT for another name.
  absl::StatusOr<std::function<absl::Status()>> AllReduceSum(
      const std::string& algorithm, float* data, size_t count);

  void Barrier();

  // Whether this platform's Gloo transport implements bound buffers (TCP does,
  // libuv does not), and its name in messages ("TCP", "libuv").
  static bool HasBoundBuffers();
  static std::string TransportName();

 private:
  struct Impl;
  explicit RawGloo(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace muster::comm

#endif  // MUSTER_COMM_RAW_GLOO_H_
