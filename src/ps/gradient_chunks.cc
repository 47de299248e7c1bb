#include "ps/gradient_chunks.h"

#include <algorithm>
#include <cstring>

#include "common/half.h"

namespace pstrain {

void GradientChunks::ForEach(ChunkFn fn) const {
  const int64_t element_bytes = dtype_ == DT_FLOAT ? 4 : 2;
  alignas(64) char raw[kBounceBytes];
  alignas(64) float wide[kBounceBytes / 2];  // room for a full bounce of 16-bit elements
  int64_t filled = 0;                        // bytes in raw
  int64_t done = 0;                          // elements passed to fn
  const auto flush = [&] {
    const int64_t n = filled / element_bytes;
    if (n == 0) return;
    const float* values = reinterpret_cast<const float*>(raw);
    if (dtype_ == DT_HALF) {
      HalfToFloat(reinterpret_cast<const uint16_t*>(raw), wide, n);
      values = wide;
    } else if (dtype_ == DT_BFLOAT16) {
      Bfloat16ToFloat(reinterpret_cast<const uint16_t*>(raw), wide, n);
      values = wide;
    }
    fn(done, values, n);
    done += n;
    filled = 0;
  };
  for (const ConstBytes& piece : pieces_) {
    const char* p = static_cast<const char*>(piece.data);
    int64_t left = piece.size;
    while (left > 0) {
      if (filled == 0 && dtype_ == DT_FLOAT && left >= 4 &&
          reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) {
        const int64_t n = left / 4;
        fn(done, reinterpret_cast<const float*>(p), n);
        done += n;
        p += n * 4;
        left -= n * 4;
        continue;
      }
      const int64_t take = std::min(left, kBounceBytes - filled);
      std::memcpy(raw + filled, p, static_cast<size_t>(take));
      filled += take;
      p += take;
      left -= take;
      if (filled == kBounceBytes) flush();
    }
  }
  flush();
}

}  // namespace pstrain
