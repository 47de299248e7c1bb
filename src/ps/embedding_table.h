// Internal to src/ps: one embedding table's rows on one PS task, with their optimizer slots,
// admission counts and eviction order. Transport-independent; the PS service (ps_tables.cc)
// validates requests, splits them by table and calls these methods.
//
// Storage: an index from key to a row slot (absl::flat_hash_map<uint64_t, uint32_t>) and one
// arena of floats holding, per slot, the row followed by its optimizer slots, plus per-slot
// bookkeeping (the key, the step of its last update, links of the eviction list, and for Adam
// its own step count). Freed slots are reused. bytes() counts all of it, the index's capacity
// included.
//
// Optimizers (OptimizerConfig, hyper-parameters as for dense variables, lr scheduled on the
// table's version, clip_norm over the whole pushed gradient of one update):
//   sgd      w -= lr g
//   adagrad  sum += g^2; w -= lr g / (sqrt(sum) + eps)     (torch.optim.Adagrad on a sparse grad)
//   adam     per row: t += 1; m, v as Adam; w -= lr m^ / (sqrt(v^) + eps) with the row's own t
//            (lazy Adam: a row's moments move only when it has a gradient; torch.optim.SparseAdam
//            when every row is updated every step)
//   ftrl     FTRL-Proximal per element, as the dense FtrlOptimizer
// Other optimizers (momentum, rmsprop) are refused by Create.
//
// Thread-safe: every method may be called concurrently; Lookup, Apply and ApplyAccumulated are
// each atomic with respect to one another (a lookup never sees half an update).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"
#include "ps.pb.h"

namespace pstrain {

class EmbeddingTable {
 public:
  // InvalidArgument naming the field for an empty or over-long name, a dim outside
  // [1, kMaxTableDim], an initializer that is unknown or bad for rows (glorot_uniform has no
  // fan-in here), an optimizer that is not sgd, adagrad, adam or ftrl or has bad
  // hyper-parameters, or negative admit_after / evict_after_steps / max_rows / max_bytes.
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(const TableDef& def);
  virtual ~EmbeddingTable() = default;

  virtual const TableDef& def() const = 0;
  int dim() const { return def().dim(); }
  // Floats per row including its optimizer slots: (1 + slots) * dim.
  virtual int floats_per_row() const = 0;

  // Writes n rows of dim floats to `out`, one per key (keys distinct; the caller checked). Each
  // lookup counts towards the key's admission; an admitted key without a row gets one, drawn
  // from the initializer with RowSeed(initializer.seed, key) (common/keys.h), which may evict
  // the least recently updated rows to stay under the caps. A key not admitted yet reads zeros
  // or its would-be initial row (def.unadmitted_zeros) and gets no row. Returns the table's
  // version the rows were read at.
  virtual uint64_t Lookup(const uint64_t* keys, int64_t n, float* out) = 0;

  // OK if a push of these keys may be applied: InvalidArgument "table 't': key K was never
  // looked up" for a key that has no row and of which the table keeps no trace, when the table
  // neither admits by count nor evicts (with admission or eviction a row may rightly be missing,
  // and its gradient is then dropped and counted as filtered). Changes nothing.
  virtual absl::Status CheckPush(const uint64_t* keys, int64_t n) const = 0;

  // OK if Apply(keys, n, grads) now would leave every weight and optimizer slot of the rows
  // finite; else InvalidArgument "table 't': the update of key K ... non-finite" (finite
  // gradients can overflow a row: two steps of 3.4e38 with lr 1). Changes nothing.
  virtual absl::Status CheckUpdate(const uint64_t* keys, int64_t n, const float* grads) const = 0;

  // One update: applies the n gradient rows (finite, checked by the caller) to the rows of
  // `keys` with the optimizer at step version(), then version() += 1. Gradients for keys
  // without a row are dropped and counted. Rows not updated for evict_after_steps steps are
  // evicted afterwards. Returns the version after the update, or CheckUpdate's error, checked
  // under the same lock as the update, with nothing applied.
  virtual absl::StatusOr<uint64_t> Apply(const uint64_t* keys, int64_t n, const float* grads) = 0;

  // Sync mode: adds the rows to the accumulator of the current step (summing rows of a key
  // pushed by several workers) ...
  virtual void Accumulate(const uint64_t* keys, int64_t n, const float* grads) = 0;
  // ... and applies its sum divided by `contributors` (> 0) as one update, as Apply does, then
  // empties it. A step whose accumulator is empty still counts: version() += 1, and so does a
  // step whose update CheckUpdate refuses: it is dropped, nothing applied, and *refused (when
  // given) set. Returns the version after the update.
  virtual uint64_t ApplyAccumulated(int contributors, bool* refused = nullptr) = 0;

  // Number of updates applied: the table's global step.
  virtual uint64_t version() const = 0;
  // Counters, rows and memory; fills every field of TableStats.
  virtual TableStats Stats() const = 0;

  // For tests: the row of `key` and its optimizer slots by torch's names (adagrad "sum", adam
  // "exp_avg" and "exp_avg_sq" and "step", ftrl "accumulator" and "linear"), or nullopt if the
  // key has no row.
  struct RowState {
    std::vector<float> row;
    std::vector<std::pair<std::string, std::vector<float>>> slots;
  };
  virtual std::optional<RowState> Row(uint64_t key) const = 0;

  // For checkpoints: every row (the row and its optimizer slots), with its step count (Adam) and
  // the step of its last update, oldest first when the table evicts; and the version. Fills
  // every field of `out` but the serialized definition.
  virtual void Export(TableRecord* out) const = 0;
  // Sets the version and gives each of the n keys the row (floats_per_row floats), the step
  // count (Adam; may be null) and the last update of a checkpoint, replacing a row it has; rows
  // past the cap evict the oldest. The caller checked the sizes and the order (oldest first).
  virtual void Import(uint64_t version, const uint64_t* keys, int64_t n, const float* floats,
                      const uint32_t* step_counts, const uint64_t* last_update) = 0;
};

// The initial row of `key` under `init` (a kind EmbeddingTable::Create accepts), `dim` floats:
// drawn from a stream seeded RowSeed(init.seed, key), so it does not depend on the PS count.
void InitialRow(const InitializerDef& init, uint64_t key, int dim, float* out);

}  // namespace pstrain
