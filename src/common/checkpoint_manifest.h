// A checkpoint's manifest.json (docs/checkpoints.md), and the list of the checkpoints under a
// root: written by the chief, read by a restore and by readers outside a job.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"
#include "nlohmann/json.hpp"

namespace pstrain {

// The file whose presence makes a ckpt-<step> directory a checkpoint.
inline constexpr char kManifestName[] = "manifest.json";

// What a checkpoint says of the model: each variable's name and full shape, each table's name
// and dim, in the model's order.
struct ModelSignature {
  std::vector<std::pair<std::string, std::vector<int64_t>>> variables;
  std::vector<std::pair<std::string, int>> tables;
  // A built-in model trained through feature columns: {"schema": ..., "stats": ...}, the
  // schema and the training rows' statistics (docs/features.md), so that a restore reads its
  // data through the same transform. Null: the model read its data's columns as they are.
  nlohmann::json features;
};

struct Manifest {
  int64_t global_step = 0;
  int num_ps = 0;
  std::vector<std::pair<std::string, WrittenFile>> files;  // name in the directory, size, XXH3
  ModelSignature signature;
  nlohmann::json ledger;  // the chief's task ledger at the cut (TaskLedger::ToJson); null: none
};

// Writes <dir>/manifest.json atomically: from then on the checkpoint exists.
absl::Status WriteManifest(const std::string& dir, const Manifest& m);
// Reads <dir>/manifest.json: NotFound if it is missing (an incomplete checkpoint), DataLoss
// naming the file if it does not parse or lacks a field.
absl::StatusOr<Manifest> ReadManifest(const std::string& dir);

// The ckpt-<step> directories under `root`, newest first (with or without a manifest).
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& root);
// The suffix of a rewrite of a checkpoint's step in progress: ckpt-<step>.next is written beside
// ckpt-<step> and swapped with it whole.
inline constexpr char kRewriteSuffix[] = ".next";
// Removes every ckpt-<step>.next under `root` (a real directory, not a link): a rewrite its
// chief did not finish, beside the checkpoint it was to replace, which is whole (before the
// swap, or after it the replaced one). Another name, such as ckpt-x.next, is left alone.
void RemoveUnfinishedRewrites(const std::string& root);
// Keeps the newest `keep` checkpoints with a manifest under `root` and removes the others, and
// every directory without a manifest (a save that failed or was cut short).
void RemoveOldCheckpoints(const std::string& root, int keep);

}  // namespace pstrain
