// The checkpoint manifest reader (common/checkpoint_manifest.h ReadManifest), which the chief
// runs on <dir>/manifest.json when it restores or lists checkpoints: any JSON, any types, any
// numbers. What it accepts has as many files as PS.
//   input: the bytes of manifest.json
#include <string>

#include "fuzz_util.h"
#include "common/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  fuzz::WriteTempFile("manifest.json", {reinterpret_cast<const char*>(data), size});
  absl::StatusOr<Manifest> m = ReadManifest(fuzz::TempDir());
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kDataLoss, m.status().ToString());
    return 0;
  }
  FUZZ_CHECK(m->num_ps >= 1 && m->files.size() == static_cast<size_t>(m->num_ps),
             "as many files as PS");
  FUZZ_CHECK(m->ledger.is_null() || m->ledger.is_object(), "the ledger is an object");
  return 0;
}
