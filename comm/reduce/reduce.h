// Element-wise reduction kernels, and the dispatch from DataType to a C++
// type, in one place for every backend that reduces on the host: Gloo's
// option-based collectives, its templated allreduce algorithms and muster's
// own ring reduce-scatter (comm/gloo/), the direct mesh (comm/direct/) and the
// shared-memory transport (comm/shm/). They include no backend. A new DataType
// needs one case in VisitDataType and, if its arithmetic is not C++'s, an Elem
// specialization.
#ifndef MUSTER_COMM_REDUCE_REDUCE_H_
#define MUSTER_COMM_REDUCE_REDUCE_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "muster/comm/types.h"

namespace muster::comm::internal {

// Gloo's reduction callback: out[i] = a[i] op b[i] for i < n; out may alias a
// or b.
using ReduceFn = std::function<void(void*, const void*, const void*, size_t)>;

// Calls fn(T{}) with the C++ type of dtype and returns its result;
// INVALID_ARGUMENT for a value outside the enum.
template <typename Fn>
absl::Status VisitDataType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32:
      return std::forward<Fn>(fn)(float{});
    case DataType::kFloat64:
      return std::forward<Fn>(fn)(double{});
    case DataType::kInt32:
      return std::forward<Fn>(fn)(int32_t{});
    case DataType::kInt64:
      return std::forward<Fn>(fn)(int64_t{});
    case DataType::kInt8:
      return std::forward<Fn>(fn)(int8_t{});
    case DataType::kUInt8:
      return std::forward<Fn>(fn)(uint8_t{});
    case DataType::kFloat16:
      return std::forward<Fn>(fn)(Float16{});
    case DataType::kBFloat16:
      return std::forward<Fn>(fn)(BFloat16{});
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown DataType ", static_cast<int>(dtype)));
}

// The arithmetic of one element type. Integer sum and product wrap on overflow
// (computed in the unsigned type, so without undefined behaviour). Float min
// and max propagate NaN, so that a NaN on one rank is not hidden by the
// others. Float16 and BFloat16 compute in float and round back.
template <typename T>
struct Elem {
  static T Add(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
  static T Multiply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // uint8 * uint8 promotes to int: multiply as unsigned int to wrap.
      using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                   std::make_unsigned_t<T>>;
      return static_cast<T>(
          static_cast<U>(static_cast<std::make_unsigned_t<T>>(a)) *
          static_cast<U>(static_cast<std::make_unsigned_t<T>>(b)));
    } else {
      return a * b;
    }
  }
  static T Min(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return b < a ? b : a;
  }
  static T Max(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return a < b ? b : a;
  }
  // x / n: truncation toward zero for integers.
  static T Divide(T a, int n) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<int64_t>(a) / n);
    } else {
      return a / static_cast<T>(n);
    }
  }
};

template <typename H>
struct HalfElem {
  static H Add(H a, H b) { return H::FromFloat(a.ToFloat() + b.ToFloat()); }
  static H Multiply(H a, H b) {
    return H::FromFloat(a.ToFloat() * b.ToFloat());
  }
  static H Min(H a, H b) {
    return H::FromFloat(Elem<float>::Min(a.ToFloat(), b.ToFloat()));
  }
  static H Max(H a, H b) {
    return H::FromFloat(Elem<float>::Max(a.ToFloat(), b.ToFloat()));
  }
  static H Divide(H a, int n) {
    return H::FromFloat(a.ToFloat() / static_cast<float>(n));
  }
};
template <>
struct Elem<Float16> : HalfElem<Float16> {};
template <>
struct Elem<BFloat16> : HalfElem<BFloat16> {};

// out[i] = kOp(a[i], b[i]); out may alias a or b.
template <typename T, T (*kOp)(T, T)>
void Kernel(void* out, const void* a, const void* b, size_t n) {
  T* c = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) c[i] = kOp(x[i], y[i]);
}

// x[i] = kOp(x[i], y[i]): the form Gloo's templated algorithms take.
template <typename T, T (*kOp)(T, T)>
void InPlaceKernel(T* x, const T* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = kOp(x[i], y[i]);
}

// The kernel for (dtype, op); kAvg reduces as kSum (the caller divides).
// INVALID_ARGUMENT for values outside the enums.
absl::StatusOr<ReduceFn> ReduceFunction(DataType dtype, ReduceOp op);

// data[i] /= n for `count` elements of dtype (the last step of kAvg).
void DivideInPlace(void* data, size_t count, DataType dtype, int n);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_REDUCE_REDUCE_H_
