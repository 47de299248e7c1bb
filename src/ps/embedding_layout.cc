#include "ps/embedding_layout.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/optimizer_config.h"
#include "ps/embedding_init.h"
#include "ps/embedding_rows.h"

namespace pstrain {
namespace {

constexpr int64_t kChunkBytes = int64_t{1} << 20;  // arena chunks of about this size

// Bytes the admission map can take if it never holds more than `keys` keys.
int64_t PendingBytesBound(int64_t keys) {
  return RowStore::IndexBytes(RowStore::IndexCapacityBound(keys));
}

int64_t FloorPow2(int64_t x) {
  return x < 1 ? 1 : int64_t{1} << (63 - std::countl_zero(uint64_t(x)));
}

}  // namespace

absl::StatusOr<TableLayout> MakeTableLayout(const TableDef& def, const TableOverhead& overhead) {
  TableLayout layout;
  const std::string& name = def.optimizer().name();
  if (name == "sgd") {
    layout = {RowRule::kSgd, 0, 0, 0, kMaxPendingKeys};
  } else if (name == "adagrad") {
    layout = {RowRule::kAdagrad, 1, 0, 0, kMaxPendingKeys};
  } else if (name == "adam") {
    layout = {RowRule::kAdam, 2, 0, 0, kMaxPendingKeys};
  } else if (name == "ftrl") {
    layout = {RowRule::kFtrl, 2, 0, 0, kMaxPendingKeys};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.name '", name,
                     "' is not supported for tables (use sgd, adagrad, adam or ftrl)"));
  }
  const int fpr = (1 + layout.slots) * def.dim();
  const bool steps = layout.rule == RowRule::kAdam;
  const int64_t slot_bytes = RowStore::SlotBytes(fpr, steps);
  int64_t chunk = FloorPow2(kChunkBytes / slot_bytes);
  layout.max_rows = RowStore::kMaxRows;
  if (def.max_rows() > 0) layout.max_rows = std::min(layout.max_rows, def.max_rows());
  chunk = std::min(chunk, static_cast<int64_t>(std::bit_ceil(uint64_t(layout.max_rows))));
  // Small byte caps get small chunks, so a chunk's unused slots cost at most 1/8 of the cap.
  if (def.max_bytes() > 0) chunk = std::min(chunk, FloorPow2(def.max_bytes() / 8 / slot_bytes));
  layout.chunk_slots = chunk;
  if (def.max_bytes() > 0) {
    // The admission counts take at most a quarter of the byte cap.
    while (layout.max_pending > 64 && PendingBytesBound(layout.max_pending) > def.max_bytes() / 4) {
      layout.max_pending /= 2;
    }
    const int64_t fixed = overhead.object_bytes +
                          (def.admit_after() > 1 ? PendingBytesBound(layout.max_pending) : 0) +
                          (steps ? overhead.adam_bytes : 0);
    auto fits = [&](int64_t rows) {
      return fixed + RowStore::BytesBound(rows, fpr, steps, chunk) <= def.max_bytes();
    };
    if (!fits(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_bytes ", def.max_bytes(), " cannot hold one row (a table of dim ",
                       def.dim(), " with ", name, " needs at least ",
                       fixed + RowStore::BytesBound(1, fpr, steps, chunk), ")"));
    }
    int64_t lo = 1, hi = std::min(layout.max_rows, def.max_bytes() / slot_bytes + 1);
    while (lo < hi) {  // the most rows that fit: fits(lo), and not fits(hi + 1) beyond
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    layout.max_rows = std::min(layout.max_rows, lo);
  }
  return layout;
}

absl::Status ValidateTableDef(const TableDef& def) {
  if (def.dim() < 1 || def.dim() > kMaxTableDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", def.dim(), " must be in [1, ", kMaxTableDim, "]"));
  }
  if (absl::Status s = ValidateRowInitializer(def.initializer()); !s.ok()) return s;
  if (absl::Status s = ValidateOptimizerConfig(
          def.optimizer(),
          [](absl::string_view field) { return absl::StrCat("optimizer.", field); });
      !s.ok()) {
    return s;
  }
  const std::pair<const char*, int64_t> non_negative[] = {
      {"admit_after", def.admit_after()},
      {"evict_after_steps", def.evict_after_steps()},
      {"max_rows", def.max_rows()},
      {"max_bytes", def.max_bytes()}};
  for (const auto& [field, value] : non_negative) {
    if (value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, " ", value, " must be >= 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
