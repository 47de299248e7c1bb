// The IDX reader (data/data.h ReadIdx: MNIST's format, raw or gzip) on any file. What it
// accepts has as many bytes as its dimensions say.
//   input: the file
#include <algorithm>
#include <string>

#include "data/data.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const std::string path =
      fuzz::WriteTempFile("data-idx1-ubyte", {reinterpret_cast<const char*>(data), size});
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  if (!a.ok()) {
    const absl::StatusCode code = a.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kDataLoss,
               a.status().ToString());
    FUZZ_CHECK(a.status().message().find(path) != std::string::npos, "the error names the file");
    return 0;
  }
  // A zero dimension empties the array whatever the others say; the product of the others may
  // not fit in 64 bits, so it is taken only when none is zero.
  int64_t count = 1;
  if (std::find(a->dims.begin(), a->dims.end(), 0) != a->dims.end()) {
    count = 0;
  } else {
    for (int64_t d : a->dims) {
      FUZZ_CHECK(!__builtin_mul_overflow(count, d, &count), "an accepted array's size fits");
    }
  }
  FUZZ_CHECK(!a->dims.empty() && static_cast<int64_t>(a->data.size()) == count,
             "as many bytes as the dimensions say");
  return 0;
}
