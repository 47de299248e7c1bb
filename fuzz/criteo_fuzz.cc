// The Criteo TSV reader (data/data.h ReadCriteo) on any file, with the options a worker reads
// its shard with. What it accepts has 13 dense and 26 categorical features per row and 0/1
// labels.
//   input: one byte of TextOptions (text_fuzzing.h), then the file (plain or gzip)
#include <cmath>

#include "text_fuzzing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  fuzz::FuzzTextReader(data, size, "data.tsv", [](const std::string& path, const TextOptions& o) {
    absl::StatusOr<Examples> e = ReadCriteo(path, o);
    if (e.ok()) {
      FUZZ_CHECK(e->dense_dim == kCriteoDense, "13 dense features");
      FUZZ_CHECK(e->sparse_keys.size() == static_cast<size_t>(e->size() * kCriteoCategorical),
                 "26 categorical features per row");
      for (float l : e->labels) FUZZ_CHECK(l == 0.0f || l == 1.0f, "a 0/1 label");
      for (float v : e->dense) FUZZ_CHECK(std::isfinite(v) && v >= 0, "log(1 + x) of a count");
    }
    return e;
  });
  return 0;
}
