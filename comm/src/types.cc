#include "muster/comm/types.h"

#include <cstring>

namespace muster::comm {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

Float16 Float16::FromFloat(float value) {
  const uint32_t f = FloatBits(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  Float16 h;
  if (abs >= 0x7f800000u) {  // Inf or NaN.
    h.bits =
        static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
    return h;
  }
  if (abs >= 0x477ff000u) {  // Rounds to a value >= 65520: infinity.
    h.bits = static_cast<uint16_t>(sign | 0x7c00u);
    return h;
  }
  if (abs < 0x38800000u) {  // Below the smallest normal half (2^-14).
    // Denormal: add the float 0.5 to shift the mantissa into place; the FPU
    // rounds to nearest even.
    const float shifted = BitsFloat(abs) + 0.5f;
    h.bits = static_cast<uint16_t>(sign | (FloatBits(shifted) - 0x3f000000u));
    return h;
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even.
  const uint32_t odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xc8000fffu + odd;  // -(127-15)<<23 + 0xfff.
  h.bits = static_cast<uint16_t>(sign | (rounded >> 13));
  return h;
}

float Float16::ToFloat() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) {  // Inf or NaN.
    return BitsFloat(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0) {  // Zero or denormal: mant * 2^-24.
    const float magnitude = static_cast<float>(mant) * BitsFloat(0x33800000u);
    return sign ? -magnitude : magnitude;
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

BFloat16 BFloat16::FromFloat(float value) {
  const uint32_t f = FloatBits(value);
  BFloat16 b;
  if ((f & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet and a NaN.
    b.bits = static_cast<uint16_t>((f >> 16) | 0x40u);
    return b;
  }
  const uint32_t odd = (f >> 16) & 1u;
  b.bits = static_cast<uint16_t>((f + 0x7fffu + odd) >> 16);
  return b;
}

float BFloat16::ToFloat() const {
  return BitsFloat(static_cast<uint32_t>(bits) << 16);
}

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return sizeof(float);
    case DataType::kFloat64:
      return sizeof(double);
    case DataType::kInt32:
      return sizeof(int32_t);
    case DataType::kInt64:
      return sizeof(int64_t);
    case DataType::kInt8:
      return sizeof(int8_t);
    case DataType::kUInt8:
      return sizeof(uint8_t);
    case DataType::kFloat16:
      return sizeof(Float16);
    case DataType::kBFloat16:
      return sizeof(BFloat16);
  }
  return 0;
}

absl::string_view DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kInt8:
      return "int8";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "unknown";
}

}  // namespace muster::comm
