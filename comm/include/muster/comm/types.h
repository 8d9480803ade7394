// Element types and reduction operators of libmuster_comm's collectives.
//
// Adding a type later (float16, bfloat16, uint8, ...) means: a new enumerator
// here, a branch in DataTypeOf (where C++ has a matching type), and one case in
// DataTypeSize, DataTypeName and each backend's dispatch. Enumerator values
// are part of the future C API and are never renumbered.
#ifndef MUSTER_COMM_TYPES_H_
#define MUSTER_COMM_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace muster::comm {

enum class DataType : int {
  kFloat32 = 0,
  kFloat64 = 1,
  kInt32 = 2,
  kInt64 = 3,
};

enum class ReduceOp : int {
  kSum = 0,
  kProduct = 1,
  kMin = 2,
  kMax = 3,
};

namespace internal {
// Makes DataTypeOf<T> a compile error (rather than a link error) for
// unsupported T.
template <typename T>
inline constexpr bool kAlwaysFalse = false;
}  // namespace internal

// The DataType of the C++ type T: float, double, int32_t or int64_t. Other
// types do not compile.
template <typename T>
constexpr DataType DataTypeOf() {
  if constexpr (std::is_same_v<T, float>) {
    return DataType::kFloat32;
  } else if constexpr (std::is_same_v<T, double>) {
    return DataType::kFloat64;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return DataType::kInt32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return DataType::kInt64;
  } else {
    static_assert(internal::kAlwaysFalse<T>,
                  "muster::comm supports float, double, int32_t and int64_t");
  }
}

// The size of one element in bytes; 0 for a value outside the enum.
// Thread-safe, never blocks.
size_t DataTypeSize(DataType dtype);

// "float32", "float64", "int32", "int64"; "unknown" for a value outside the
// enum.
absl::string_view DataTypeName(DataType dtype);

// "sum", "product", "min", "max"; "unknown" for a value outside the enum.
absl::string_view ReduceOpName(ReduceOp op);

}  // namespace muster::comm

#endif  // MUSTER_COMM_TYPES_H_
