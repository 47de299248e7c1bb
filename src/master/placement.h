// Internal to src/master: how the chief partitions variables into shards along their first axis
// and places the shards on PS tasks, in the spirit of TensorFlow's partitioners
// (fixed_size_partitioner, min_max_variable_partitioner, variable_axis_size_partitioner) and
// replica_device_setter (round-robin or greedy-by-bytes load balancing).
//
// Pure functions over the standard library and abseil: no proto, no gRPC, no I/O.
// All variables are float32, 4 bytes per element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// kAuto's bounds: splitting below 256 KiB costs more in requests than it balances (TensorFlow's
// min_slice_size idea), and a shard of at most 64 MiB travels in any message.
constexpr int64_t kAutoMinShardBytes = int64_t{256} << 10;
constexpr int64_t kAutoMaxShardBytes = int64_t{64} << 20;

// How to split one variable into shards along axis 0.
struct PartitionerSpec {
  enum class Kind {
    kNone,           // never split: one shard
    kFixed,          // min(num_shards, rows) shards
    kMinShardBytes,  // as many shards as possible, each of at least shard_bytes
    kMaxShardBytes,  // as few shards as possible, each of at most shard_bytes
    // The default: a variable over kAutoMinShardBytes is split into up to max_shards shards of
    // at least kAutoMinShardBytes, and always into enough that none exceeds kAutoMaxShardBytes.
    kAuto,
  };
  Kind kind = Kind::kNone;
  int num_shards = 1;       // kFixed; must be >= 1
  int64_t shard_bytes = 0;  // kMinShardBytes: every shard at least this many bytes;
                            // kMaxShardBytes: at most. Must be > 0 for those kinds.
  // Upper bound on the number of shards for every kind (0 = no bound other than the number of
  // rows; must be >= 0). The chief passes the number of PS tasks for kMinShardBytes and kAuto,
  // like TF's min_max_variable_partitioner(max_partitions). kAuto's 64 MiB bound overrides it.
  int max_shards = 0;
};

// Parses a partitioner as written on the command line: "auto", "none", "fixed:N" (N >= 1),
// "min_bytes:B" or "max_bytes:B" (B >= 1, in bytes). max_shards is left 0 for the caller to set.
// InvalidArgument naming the bad text and listing the accepted forms.
absl::StatusOr<PartitionerSpec> ParsePartitioner(const std::string& text);

// Rows [begin, end) along axis 0.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t rows() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

// Splits a variable of `shape` (float32) along its first axis into contiguous row ranges that
// cover [0, rows) in order and whose sizes differ by at most one row, larger shards first (as TF
// does). A row holds 4 * (product of shape[1:]) bytes.
//  - Scalars (empty shape) are one shard {0, 1}; variables with 0 or 1 rows are one shard
//    {0, rows}. Neither is ever split.
//  - kNone: one shard.
//  - kFixed: min(num_shards, rows) shards.
//  - kMinShardBytes: the most shards such that even the smallest is >= shard_bytes (at least 1).
//  - kMaxShardBytes: the fewest shards such that even the largest is <= shard_bytes; if a single
//    row exceeds shard_bytes, one row per shard.
//  - kAuto: see PartitionerSpec::Kind.
//  - The result is then capped by spec.max_shards when it is > 0 (for kAuto, only down to the
//    count that keeps every shard within kAutoMaxShardBytes).
// InvalidArgument for a bad spec (num_shards < 1 for kFixed, shard_bytes <= 0 for the byte
// kinds, max_shards < 0), a negative dimension, a size that overflows int64 bytes, or more than
// kMaxVariablesPerRequest shards.
absl::StatusOr<std::vector<RowRange>> PartitionRows(const std::vector<int64_t>& shape,
                                                    const PartitionerSpec& spec);

enum class PlacementStrategy {
  kRoundRobin,   // item i on PS i % num_ps, like replica_device_setter's default
  kGreedyBytes,  // largest item first, each on the least-loaded PS so far
};

// Parses "round_robin" or "greedy"; InvalidArgument naming the bad text otherwise.
absl::StatusOr<PlacementStrategy> ParsePlacement(const std::string& text);

// The PS task for each item, given the item sizes in bytes (>= 0; negatives count as 0), in the
// items' order. kRoundRobin: i % num_ps. kGreedyBytes: items in decreasing size (equal sizes in
// index order), each to the PS with the least bytes so far (ties: lowest PS index); fully
// deterministic, and the largest load is at most total / num_ps + the largest item.
// num_ps < 1 is treated as 1.
// `initial_load` (optional) is the bytes already on each PS from earlier calls (missing entries
// count as 0): greedy then fills the lightest PS first; round-robin ignores it.
std::vector<int> PlaceItems(const std::vector<int64_t>& bytes, int num_ps,
                            PlacementStrategy strategy,
                            const std::vector<int64_t>& initial_load = {});

// A readable multi-line table for logs: a header, one row per item (name, shape, bytes, ps),
// then one line per PS "ps <i>: <n> items, <bytes> bytes (<human>, <pct>%)" and a total line.
// Uses the first min(names, shapes, ps) items; an item whose ps is outside [0, num_ps) is listed
// but counted in no PS total.
std::string PlacementTable(const std::vector<std::string>& names,
                           const std::vector<std::vector<int64_t>>& shapes,
                           const std::vector<int>& ps, int num_ps);

// Rows of cells as text columns two spaces apart, one line per row: each column as wide as its
// widest cell, its cells left-aligned (right-aligned for the columns `right_aligned` lists); a
// row's last cell is not padded.
std::string TextColumns(const std::vector<std::vector<std::string>>& rows,
                        const std::vector<size_t>& right_aligned = {});

}  // namespace pstrain
