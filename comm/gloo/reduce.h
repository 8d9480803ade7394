// Element-wise reduction kernels for Gloo's allreduce, and the dispatch from
// DataType to a C++ type. A new DataType needs one case in VisitDataType (and a
// kernel if + - min max do not fit).
#ifndef MUSTER_COMM_GLOO_REDUCE_H_
#define MUSTER_COMM_GLOO_REDUCE_H_

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
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown DataType ", static_cast<int>(dtype)));
}

// The kernel for (dtype, op). INVALID_ARGUMENT for values outside the enums.
// Integer sum and product wrap on overflow (computed in the unsigned type, so
// without undefined behaviour). Float min and max propagate NaN, so that a NaN
// on one rank is not hidden by the others.
absl::StatusOr<ReduceFn> ReduceFunction(DataType dtype, ReduceOp op);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_REDUCE_H_
