// The LibSVM reader (data/data.h ReadLibSvm) on any file, with the options a worker reads its
// shard with. What it accepts has strictly increasing indices per row.
//   input: one byte of TextOptions (text_fuzzing.h), then the file (plain or gzip)
#include "text_fuzzing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  fuzz::FuzzTextReader(
      data, size, "data.libsvm", [](const std::string& path, const TextOptions& o) {
        absl::StatusOr<Examples> e = ReadLibSvm(path, o);
        if (e.ok()) {
          for (int64_t r = 0; r < e->size(); ++r) {
            for (int64_t k = e->sparse_offsets[r] + 1; k < e->sparse_offsets[r + 1]; ++k) {
              FUZZ_CHECK(e->sparse_keys[k] > e->sparse_keys[k - 1], "indices rise in a row");
            }
          }
        }
        return e;
      });
  return 0;
}
