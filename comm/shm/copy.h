// Copies for the shared-memory transport's large allreduces (shm_backend.cc).
#ifndef MUSTER_COMM_SHM_COPY_H_
#define MUSTER_COMM_SHM_COPY_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace muster::comm::internal::shm_copy {

// memcpy with non-temporal stores (the destination's lines are not read
// first and do not evict the caches' contents). x86-64 only; memcpy
// elsewhere.
inline void StreamCopy(char* dst, const char* src, size_t n) {
#if defined(__x86_64__)
  const size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (n < head + 64) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  auto* d = reinterpret_cast<__m128i*>(dst);
  const auto* p = reinterpret_cast<const __m128i*>(src);
  const size_t blocks = n / 64;
  for (size_t i = 0; i < blocks; ++i, d += 4, p += 4) {
    const __m128i a = _mm_loadu_si128(p);
    const __m128i b = _mm_loadu_si128(p + 1);
    const __m128i c = _mm_loadu_si128(p + 2);
    const __m128i e = _mm_loadu_si128(p + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
  std::memcpy(d, p, n % 64);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace muster::comm::internal::shm_copy

#endif  // MUSTER_COMM_SHM_COPY_H_
