// The check of a TableDef and the storage it asks for (internal to src/ps; EmbeddingTable in
// embedding_table.cc is its only user): the row rule, the arena's chunk size and the effective
// caps on rows and admission counts, so that a table under max_bytes never takes more.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps.pb.h"

namespace pstrain {

// The most admission counts a table keeps (fewer under a byte cap).
inline constexpr int64_t kMaxPendingKeys = int64_t{1} << 17;

enum class RowRule { kSgd, kAdagrad, kAdam, kFtrl };

struct TableLayout {
  RowRule rule;
  int slots;            // optimizer slots per row (each dim floats)
  int64_t chunk_slots;  // RowStore slots per chunk
  int64_t max_rows;     // the effective row cap (both caps, and RowStore::kMaxRows)
  int64_t max_pending;  // admission counts kept (kMaxPendingKeys, fewer under a byte cap)
};

// What a table takes besides its rows, its index and its admission counts.
struct TableOverhead {
  int64_t object_bytes;  // the table object itself
  int64_t adam_bytes;    // Adam's cached bias corrections (tables with adam only)
};

// InvalidArgument naming the field unless `def`'s dim, initializer, optimizer and caps are valid.
absl::Status ValidateTableDef(const TableDef& def);

// The layout of a valid `def`; InvalidArgument for an optimizer tables do not have, or a
// max_bytes that cannot hold one row.
absl::StatusOr<TableLayout> MakeTableLayout(const TableDef& def, const TableOverhead& overhead);

}  // namespace pstrain
