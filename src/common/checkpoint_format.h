// The checkpoint part file: what one PS task writes for one checkpoint (`ps-<i>.ckpt` in
// `<dir>/ckpt-<global_step>/`), read by the chief to restore. Used by the PS (writing) and the
// chief (reading), hence in common. docs/checkpoints.md describes the layout byte by byte.
//
//   header   "PSTCKPT\n" (8 bytes), u32 format version, u32 ps task, u32 number of PS,
//            u64 checkpoint id (the global step)
//   records  u8 kind (1 shard, 2 table), u64 payload bytes, payload (format 2: ending with the
//            watermarks, u64 count then per item i32 epoch, i64 task, i64 next_batch)
//   trailer  "PSTCKEND" (8 bytes), u64 bytes before the trailer, u64 XXH3_64bits of those bytes
//
// All integers and floats are little-endian; strings and arrays are a u64 count then the items.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

// Version 2 adds the task watermarks (`applied`) at the end of each record; version 1 files are
// still read (their `applied` empty).
constexpr uint32_t kCheckpointFormatVersion = 2;
constexpr uint32_t kOldestCheckpointFormatVersion = 1;

// One optimizer slot of a shard (or of a variable, reassembled): its name as Optimizer::slots()
// names it, and as many floats as the values.
struct SlotValues {
  std::string name;
  std::vector<float> values;
};

// Per (epoch, task) of the chief's queue: batches [0, next_batch) applied (PushTag, ps.proto).
struct TaskWatermarkRecord {
  int32_t epoch = 0;
  int64_t task = 0;
  int64_t next_batch = 0;
};

// One dense variable shard: rows [row_begin, row_end) of variable `variable` of shape `shape`.
struct ShardRecord {
  std::string name;  // the shard's name on the PS ("w" or "w/part_1")
  std::string variable;
  std::vector<int64_t> shape;  // the full variable's
  int64_t row_begin = 0, row_end = 0;
  uint64_t version = 0;          // updates applied to the shard
  int64_t update_count = 0;      // the optimizer's own count (Adam's t), 0 for the others
  std::string optimizer;         // the OptimizerConfig's name
  std::string optimizer_config;  // the serialized OptimizerConfig
  std::vector<float> values;
  std::vector<SlotValues> slots;
  std::vector<TaskWatermarkRecord> applied;  // format 2; empty in format 1
};

// The rows one PS holds of one embedding table.
struct TableRecord {
  std::string name;
  std::string table_def;  // the serialized TableDef
  int32_t dim = 0;
  int32_t floats_per_row = 0;  // dim * (1 + optimizer slots): the row, then its slots
  uint64_t version = 0;
  std::vector<uint64_t> keys;
  std::vector<float> floats;                 // floats_per_row per key
  std::vector<uint32_t> step_counts;         // per key for Adam (its own t), else empty
  std::vector<uint64_t> last_update;         // per key: the table step of its last update
  std::vector<TaskWatermarkRecord> applied;  // format 2; empty in format 1
};

struct PartFile {
  uint32_t ps_task = 0;
  uint32_t num_ps = 0;
  uint64_t checkpoint_id = 0;
  std::vector<ShardRecord> shards;
  std::vector<TableRecord> tables;
  // Bytes of floats and keys held (for logs and the pause measurement).
  int64_t PayloadBytes() const;
};

// A part file's size and checksum, as the manifest lists them.
struct WrittenFile {
  int64_t bytes = 0;
  uint64_t checksum = 0;  // XXH3_64bits of the bytes before the trailer, as the trailer holds it
};

// Writes `part` to `path` + ".tmp", fsyncs it, renames it to `path` and fsyncs the directory.
// On an error (a full disk, a file size limit, an unwritable directory) the temporary file is
// removed and the error names the path and the system's reason; `path` is then untouched.
// `format_version` (kOldestCheckpointFormatVersion .. kCheckpointFormatVersion) is for tests of
// old files: format 1 drops the watermarks.
absl::StatusOr<WrittenFile> WritePartFile(const PartFile& part, const std::string& path,
                                          uint32_t format_version = kCheckpointFormatVersion);

// Reads and checks a part file: DataLoss naming `path` for a short file, a bad magic, an unknown
// format version, a checksum mismatch or a malformed record (a negative watermark included);
// NotFound if it does not exist. Every count and size the file holds is checked against the
// bytes left and against common/limits.h (names, shapes, tensor bytes, tables, slots, tasks)
// before anything is sized by it, and every record must be as long as it says. The part is
// opened without following a symbolic link, and must be a regular file. `expected_bytes` (>= 0:
// the manifest's) is compared with the file's size before the file is read.
// `info` (optional) receives the file's size and checksum.
absl::StatusOr<PartFile> ReadPartFile(const std::string& path, WrittenFile* info = nullptr,
                                      int64_t expected_bytes = -1);

// Reads a checkpoint's small file (its manifest) whole: a regular file, not through a symbolic
// link, of at most `max_bytes` (DataLoss naming `path` otherwise; NotFound if it is missing).
absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path, int64_t max_bytes);

// Writes `text` to `path` atomically (tmp, fsync, rename, fsync of the directory).
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace pstrain
