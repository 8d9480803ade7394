#include "muster/comm/raw_gloo.h"

#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "comm/gloo/gloo_device.h"
#include "comm/gloo/gloo_store.h"
#include "comm/src/core.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier.h"
#include "gloo/rendezvous/context.h"

namespace muster::comm {

struct RawGloo::Impl {
  std::shared_ptr<::gloo::rendezvous::Context> context;
};

RawGloo::RawGloo(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RawGloo::~RawGloo() = default;

absl::StatusOr<std::unique_ptr<RawGloo>> RawGloo::Connect(
    std::shared_ptr<store::Store> store, int rank, int size,
    const std::string& host) {
  auto impl = std::make_unique<Impl>();
  try {
    internal::CoreConfig config;
    config.hostname = host;
    auto device = internal::NewGlooDevice(config);
    impl->context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    impl->context->setTimeout(std::chrono::minutes(10));
    internal::GlooStore gloo_store(store, "bench/raw/", absl::Minutes(5));
    impl->context->connectFullMesh(gloo_store, device);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("raw gloo: ", e.what()));
  }
  return std::unique_ptr<RawGloo>(new RawGloo(std::move(impl)));
}

absl::StatusOr<std::function<absl::Status()>> RawGloo::AllReduceSum(
    const std::string& algorithm, float* data, size_t count) {
  const auto& context = impl_->context;
  const int n = static_cast<int>(count);
  std::vector<float*> ptrs = {data};
  auto fn = ::gloo::ReductionFunction<float>::sum;
  std::shared_ptr<::gloo::Algorithm> algo;
  if (algorithm == "ring") {
    algo = std::make_shared<::gloo::AllreduceRing<float>>(context, ptrs, n, fn);
  } else if (algorithm == "ring_chunked") {
    algo = std::make_shared<::gloo::AllreduceRingChunked<float>>(context, ptrs,
                                                                 n, fn);
  } else if (algorithm == "halving_doubling") {
    algo = std::make_shared<::gloo::AllreduceHalvingDoubling<float>>(
        context, ptrs, n, fn);
  } else if (algorithm == "bcube") {
    algo =
        std::make_shared<::gloo::AllreduceBcube<float>>(context, ptrs, n, fn);
  } else if (algorithm == "opt_ring" || algorithm == "opt_bcube") {
    const auto which = algorithm == "opt_ring"
                           ? ::gloo::AllreduceOptions::Algorithm::RING
                           : ::gloo::AllreduceOptions::Algorithm::BCUBE;
    return std::function<absl::Status()>([context, data, count, which]() {
      ::gloo::AllreduceOptions opts(context);
      opts.setOutput(data, count);
      opts.setAlgorithm(which);
      opts.setReduceFunction(
          [](void* c, const void* a, const void* b, size_t k) {
            float* z = static_cast<float*>(c);
            const float* x = static_cast<const float*>(a);
            const float* y = static_cast<const float*>(b);
            for (size_t i = 0; i < k; ++i) z[i] = x[i] + y[i];
          });
      ::gloo::allreduce(opts);
      return absl::OkStatus();
    });
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown Gloo algorithm ", algorithm));
  }
  return std::function<absl::Status()>([algo]() {
    algo->run();
    return absl::OkStatus();
  });
}

void RawGloo::Barrier() {
  ::gloo::BarrierOptions opts(impl_->context);
  ::gloo::barrier(opts);
}

bool RawGloo::HasBoundBuffers() { return internal::GlooHasBoundBuffers(); }

std::string RawGloo::TransportName() { return internal::GlooTransportName(); }

}  // namespace muster::comm
