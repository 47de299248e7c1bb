// A checkpoint read back whole (docs/checkpoints.md): by a restore in the chief, and by readers
// outside a job (`pstrain checkpoint inspect`, ReadCheckpoint of the client library).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"
#include "common/checkpoint_manifest.h"
#include "nlohmann/json.hpp"

namespace pstrain {

// A checkpoint read back whole: every variable reassembled from its shards (values and each
// slot), and every table's rows gathered from all parts.
struct LoadedCheckpoint {
  struct Variable {
    std::string name;
    std::vector<int64_t> shape;
    std::string optimizer;         // the OptimizerConfig's name
    std::string optimizer_config;  // serialized
    uint64_t version = 0;          // the largest of its shards'
    int64_t update_count = 0;      // the largest of its shards'
    std::vector<float> values;
    std::vector<SlotValues> slots;
    // Per saved shard: rows [begin, end), version and update count (for a resharded restore).
    struct Piece {
      int64_t begin, end;
      uint64_t version;
      int64_t update_count;
      std::vector<TaskWatermarkRecord> applied;  // the shard's task watermarks
    };
    std::vector<Piece> pieces;
  };
  std::string path;  // the ckpt-<step> directory
  int64_t global_step = 0;
  int num_ps = 0;
  ModelSignature signature;
  std::vector<Variable> variables;  // in the manifest's order
  // All rows of each table, oldest update first; `applied` per (epoch, task) the smallest
  // watermark of the parts.
  std::vector<TableRecord> tables;
  // Per table (as `tables`), per saved part: that part's own watermarks. A cut in async mode can
  // fall between the parts of one push, so the parts differ; restored into as many PS, each part
  // takes its own (the keys go where they were), and none applies a batch it holds again.
  std::vector<std::vector<std::vector<TaskWatermarkRecord>>> table_part_applied;
  // The manifest's "ledger" (TaskLedger::ToJson); null if none. A task it says applied whose
  // batches are not all in every shard and table (by the watermarks: a push still queued at the
  // cut) is rewritten as pending, so a restored job redoes it.
  nlohmann::json ledger;
};

// Per (epoch, task), the smallest watermark of `lists` (each a shard's or a table part's), a
// task missing in one counting as 0; sorted by (epoch, task), without zeros.
std::vector<TaskWatermarkRecord> MinWatermarks(
    const std::vector<const std::vector<TaskWatermarkRecord>*>& lists);

// Reads `path`: a ckpt-<step> directory, or a checkpoint root whose newest valid checkpoint is
// used (an invalid one, a part truncated, corrupted or missing, is reported by a warning naming
// the file, and the one before it is tried). NotFound if the root holds no checkpoint (no
// ckpt-<step> with a manifest); DataLoss naming the file and the field if it holds some but
// none is valid, or for a ckpt-<step> directory that is not valid. Every field of the manifest
// and the parts is checked against common/limits.h before anything is sized by it, and the
// memory a variable takes is bounded by what its parts hold (ResourceExhausted if even that
// does not fit).
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path);

// LoadCheckpoint for a reader outside a job: a path that does not exist is NotFound naming it,
// and the messages do not name --restore_from.
absl::StatusOr<LoadedCheckpoint> LoadCheckpointToRead(const std::string& path);

}  // namespace pstrain
