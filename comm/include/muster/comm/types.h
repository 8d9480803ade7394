// Element types and reduction operators of libmuster_comm's collectives.
//
// Enumerator values are part of the C API (muster/comm/c_api.h mirrors them)
// and are never renumbered. Adding a type means: a new enumerator here, a
// branch in DataTypeOf (where C++ has a matching type), one case in
// DataTypeSize and DataTypeName, and one case in each backend's dispatch.
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
  kInt8 = 4,
  kUInt8 = 5,
  kFloat16 = 6,   // IEEE 754 binary16.
  kBFloat16 = 7,  // bfloat16: the upper half of a float32.
};

enum class ReduceOp : int {
  kSum = 0,
  kProduct = 1,
  kMin = 2,
  kMax = 3,
  // The sum divided by the number of ranks. Floating-point types divide after
  // the sum; integer types divide the (wrapped) sum and truncate toward zero,
  // as NCCL's ncclAvg does.
  kAvg = 4,
};

// IEEE 754 half precision, stored as its bits. Reductions on it convert each
// pair of operands to float32, combine them, and round the result back to the
// nearest half (ties to even), as NCCL does: a sum over many ranks is rounded
// once per step, not once at the end.
struct Float16 {
  uint16_t bits = 0;

  // Rounds to nearest, ties to even; overflows to infinity; keeps NaN a NaN.
  static Float16 FromFloat(float value);
  float ToFloat() const;

  friend bool operator==(Float16 a, Float16 b) { return a.bits == b.bits; }
  friend bool operator!=(Float16 a, Float16 b) { return a.bits != b.bits; }
};

// bfloat16 (the upper 16 bits of a float32), stored as its bits; reductions
// convert through float32 as for Float16.
struct BFloat16 {
  uint16_t bits = 0;

  // Rounds to nearest, ties to even; keeps NaN a NaN.
  static BFloat16 FromFloat(float value);
  float ToFloat() const;

  friend bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }
  friend bool operator!=(BFloat16 a, BFloat16 b) { return a.bits != b.bits; }
};

namespace internal {
// Makes DataTypeOf<T> a compile error (rather than a link error) for
// unsupported T.
template <typename T>
inline constexpr bool kAlwaysFalse = false;
}  // namespace internal

// The DataType of the C++ type T: float, double, int32_t, int64_t, int8_t,
// uint8_t, Float16 or BFloat16. Other types do not compile.
template <typename T>
constexpr DataType DataTypeOf() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return DataType::kFloat32;
  } else if constexpr (std::is_same_v<U, double>) {
    return DataType::kFloat64;
  } else if constexpr (std::is_same_v<U, int32_t>) {
    return DataType::kInt32;
  } else if constexpr (std::is_same_v<U, int64_t>) {
    return DataType::kInt64;
  } else if constexpr (std::is_same_v<U, int8_t>) {
    return DataType::kInt8;
  } else if constexpr (std::is_same_v<U, uint8_t>) {
    return DataType::kUInt8;
  } else if constexpr (std::is_same_v<U, Float16>) {
    return DataType::kFloat16;
  } else if constexpr (std::is_same_v<U, BFloat16>) {
    return DataType::kBFloat16;
  } else {
    static_assert(internal::kAlwaysFalse<T>,
                  "muster::comm supports float, double, int32_t, int64_t, "
                  "int8_t, uint8_t, Float16 and BFloat16");
  }
}

// The size of one element in bytes; 0 for a value outside the enum.
// Thread-safe, never blocks.
size_t DataTypeSize(DataType dtype);

// "float32", "float64", "int32", "int64", "int8", "uint8", "float16",
// "bfloat16"; "unknown" for a value outside the enum. Thread-safe.
absl::string_view DataTypeName(DataType dtype);

// "sum", "product", "min", "max", "avg"; "unknown" for a value outside the
// enum. Thread-safe.
absl::string_view ReduceOpName(ReduceOp op);

}  // namespace muster::comm

#endif  // MUSTER_COMM_TYPES_H_
