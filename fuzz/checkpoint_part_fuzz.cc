// The checkpoint part reader (common/checkpoint_format.h ReadPartFile), which the chief runs on
// files a PS wrote and anyone with access to the checkpoint directory may have changed. The
// input is the part's bytes before its trailer; the target appends a valid trailer (its size and
// XXH3), so the fuzzer reaches the records instead of stopping at the checksum. What is read must
// hold together: a slot as long as its values, a table's arrays as long as its keys.
//   input: the header and records of a part file (docs/checkpoints.md)
#include <xxhash.h>

#include <cstring>
#include <string>

#include "common/checkpoint_format.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  std::string file(reinterpret_cast<const char*>(data), size);
  const uint64_t checksum = XXH3_64bits(data, size);
  const int64_t body = static_cast<int64_t>(size);
  file.append("PSTCKEND", 8);
  file.append(reinterpret_cast<const char*>(&body), 8);
  file.append(reinterpret_cast<const char*>(&checksum), 8);
  WrittenFile info;
  absl::StatusOr<PartFile> part = ReadPartFile(fuzz::WriteTempFile("ps-0.ckpt", file), &info);
  if (!part.ok()) {
    FUZZ_CHECK(part.status().code() == absl::StatusCode::kDataLoss, part.status().ToString());
    return 0;
  }
  FUZZ_CHECK(info.bytes == static_cast<int64_t>(file.size()) && info.checksum == checksum,
             "the file's size and checksum");
  for (const ShardRecord& s : part->shards) {
    for (const SlotValues& slot : s.slots) {
      FUZZ_CHECK(slot.values.size() == s.values.size(), "a slot as long as its shard");
    }
    for (const TaskWatermarkRecord& w : s.applied) {
      FUZZ_CHECK(w.epoch >= 0 && w.task >= 0 && w.next_batch >= 0, "a negative watermark");
    }
  }
  for (const TableRecord& t : part->tables) {
    const size_t n = t.keys.size();
    FUZZ_CHECK(t.floats_per_row >= 1 && t.floats.size() == n * t.floats_per_row,
               "a table's floats");
    FUZZ_CHECK(t.last_update.size() == n && (t.step_counts.empty() || t.step_counts.size() == n),
               "a table's per-key arrays");
  }
  (void)part->PayloadBytes();
  return 0;
}
