// Reads a fuzzer's bytes as a stream of small decisions. Past the end every
// read returns zeros, so any input is a complete program.
#ifndef MUSTER_TESTS_FUZZ_FUZZ_INPUT_H_
#define MUSTER_TESTS_FUZZ_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace muster::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }

  uint8_t Byte() { return empty() ? 0 : data_[pos_++]; }

  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | Byte();
    return v;
  }

  // A value in [0, n).
  uint32_t Below(uint32_t n) { return n == 0 ? 0 : U32() % n; }

  // Up to `max` raw bytes, length first.
  std::string Bytes(size_t max) {
    const size_t n = std::min<size_t>(Byte(), max);
    std::string s;
    for (size_t i = 0; i < n && !empty(); ++i) {
      s.push_back(static_cast<char>(Byte()));
    }
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace muster::fuzz

#endif  // MUSTER_TESTS_FUZZ_FUZZ_INPUT_H_
