#include "comm/gloo/reduce.h"

namespace muster::comm::internal {
namespace {

template <typename T>
T Add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
T Multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T>
T Min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

template <typename T>
T Max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}

template <typename T, T (*kOp)(T, T)>
void Kernel(void* out, const void* a, const void* b, size_t n) {
  T* c = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) c[i] = kOp(x[i], y[i]);
}

}  // namespace

absl::StatusOr<ReduceFn> ReduceFunction(DataType dtype, ReduceOp op) {
  ReduceFn fn;
  absl::Status status = VisitDataType(dtype, [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    switch (op) {
      case ReduceOp::kSum:
        fn = &Kernel<T, &Add<T>>;
        return absl::OkStatus();
      case ReduceOp::kProduct:
        fn = &Kernel<T, &Multiply<T>>;
        return absl::OkStatus();
      case ReduceOp::kMin:
        fn = &Kernel<T, &Min<T>>;
        return absl::OkStatus();
      case ReduceOp::kMax:
        fn = &Kernel<T, &Max<T>>;
        return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ReduceOp ", static_cast<int>(op)));
  });
  if (!status.ok()) return status;
  return fn;
}

}  // namespace muster::comm::internal
