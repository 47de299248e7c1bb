// Internal to src/ps: a pushed gradient's elements as float32 in bounded chunks, from bytes that
// arrived in pieces (gRPC's received slices) at any alignment, as float32 or as 16-bit floats
// (common/half.h), so that a push is checked and applied without a staging copy of its size.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "tensor.pb.h"
#include "transport/transport.h"

namespace pstrain {

// Called with consecutive ranges of a gradient's elements: `begin` (an element index), `count`
// floats at `values` (valid only during the call).
using ChunkFn = absl::FunctionRef<void(int64_t begin, const float* values, int64_t count)>;

class GradientChunks {
 public:
  // Elements bigger than the bounce buffer are not a concern: an element is 2 or 4 bytes.
  static constexpr int64_t kBounceBytes = 8192;

  GradientChunks() = default;
  // `pieces` (not owned: they must outlive every ForEach) hold, in order, `elements` elements of
  // `dtype` (DT_FLOAT, DT_HALF or DT_BFLOAT16), as GradientData checked.
  GradientChunks(DataType dtype, absl::Span<const ConstBytes> pieces, int64_t elements)
      : dtype_(dtype), pieces_(pieces), elements_(elements) {}

  int64_t elements() const { return elements_; }
  // Calls fn for ranges covering [0, elements()) in order: float32 pieces at a float's
  // alignment are passed where they lie, everything else through a bounce buffer on the stack
  // (at most kBounceBytes of input at a time). Allocates nothing.
  void ForEach(ChunkFn fn) const;

 private:
  DataType dtype_ = DT_FLOAT;
  absl::Span<const ConstBytes> pieces_;
  int64_t elements_ = 0;
};

}  // namespace pstrain
