#include "master/placement.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "common/tensor.h"

namespace pstrain {
namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

constexpr absl::string_view kPartitionerForms =
    "expected auto, none, fixed:N (N >= 1), min_bytes:B or max_bytes:B (B >= 1 bytes)";

// Bytes of one row (4 * product of shape[1:]); InvalidArgument on a negative dim or overflow.
absl::StatusOr<int64_t> RowBytes(const std::vector<int64_t>& shape) {
  int64_t bytes = kFloatBytes;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative dimension ", shape[i], " in shape [",
                                                     absl::StrJoin(shape, ","), "]"));
    }
    if (i == 0) continue;
    if (shape[i] != 0 && bytes > kMaxInt64 / shape[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "] overflows int64 bytes"));
    }
    bytes *= shape[i];
  }
  return bytes;
}

// Saturating bytes of a whole variable, for the table (scalars are one element).
int64_t ShapeBytes(const std::vector<int64_t>& shape) {
  int64_t bytes = kFloatBytes;
  for (int64_t d : shape) {
    if (d <= 0) return 0;
    if (bytes > kMaxInt64 / d) return kMaxInt64;
    bytes *= d;
  }
  return bytes;
}

// Shards of at least `min_bytes`: the smallest of n shards has floor(rows / n) rows.
int64_t MostShardsOfAtLeast(int64_t rows, int64_t row_bytes, int64_t min_bytes) {
  return row_bytes > 0 ? rows / CeilDiv(min_bytes, row_bytes) : 1;
}
// Shards of at most `max_bytes`: the largest of n shards has ceil(rows / n) rows; one row per
// shard if a single row is larger.
int64_t FewestShardsOfAtMost(int64_t rows, int64_t row_bytes, int64_t max_bytes) {
  if (row_bytes <= 0) return 1;
  const int64_t max_rows = max_bytes / row_bytes;
  return max_rows == 0 ? rows : CeilDiv(rows, max_rows);
}

}  // namespace

absl::StatusOr<PartitionerSpec> ParsePartitioner(const std::string& text) {
  PartitionerSpec spec;
  if (text == "none") return spec;
  if (text == "auto") {
    spec.kind = PartitionerSpec::Kind::kAuto;
    return spec;
  }
  const size_t colon = text.find(':');
  const absl::string_view name = absl::string_view(text).substr(0, colon);
  if (colon == std::string::npos ||
      (name != "fixed" && name != "min_bytes" && name != "max_bytes")) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown partitioner \"", text, "\": ", kPartitionerForms));
  }
  const std::string number = text.substr(colon + 1);
  int64_t value = 0;
  if (!absl::SimpleAtoi(number, &value) || value < 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad partitioner \"", text, "\": \"", number,
                                                   "\" is not a positive integer; ",
                                                   kPartitionerForms));
  }
  if (name == "fixed") {
    if (value > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad partitioner \"", text, "\": too many shards"));
    }
    spec.kind = PartitionerSpec::Kind::kFixed;
    spec.num_shards = static_cast<int>(value);
  } else {
    spec.kind = name == "min_bytes" ? PartitionerSpec::Kind::kMinShardBytes
                                    : PartitionerSpec::Kind::kMaxShardBytes;
    spec.shard_bytes = value;
  }
  return spec;
}

absl::StatusOr<std::vector<RowRange>> PartitionRows(const std::vector<int64_t>& shape,
                                                    const PartitionerSpec& spec) {
  using Kind = PartitionerSpec::Kind;
  if (spec.kind == Kind::kFixed && spec.num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("fixed partitioner needs num_shards >= 1, got ", spec.num_shards));
  }
  if ((spec.kind == Kind::kMinShardBytes || spec.kind == Kind::kMaxShardBytes) &&
      spec.shard_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.kind == Kind::kMinShardBytes ? "min_bytes" : "max_bytes",
                     " partitioner needs shard_bytes > 0, got ", spec.shard_bytes));
  }
  if (spec.max_shards < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("partitioner needs max_shards >= 0, got ", spec.max_shards));
  }
  absl::StatusOr<int64_t> row_bytes_or = RowBytes(shape);
  if (!row_bytes_or.ok()) return row_bytes_or.status();
  const int64_t row_bytes = *row_bytes_or;

  if (shape.empty()) return std::vector<RowRange>{{0, 1}};  // a scalar: one "row"
  const int64_t rows = shape[0];
  if (rows <= 1) return std::vector<RowRange>{{0, rows}};

  int64_t n = 1;
  switch (spec.kind) {
    case Kind::kNone:
      break;
    case Kind::kFixed:
      n = spec.num_shards;
      break;
    case Kind::kMinShardBytes:
      n = MostShardsOfAtLeast(rows, row_bytes, spec.shard_bytes);
      break;
    case Kind::kMaxShardBytes:
      n = FewestShardsOfAtMost(rows, row_bytes, spec.shard_bytes);
      break;
    case Kind::kAuto:
      n = MostShardsOfAtLeast(rows, row_bytes, kAutoMinShardBytes);
      break;
  }
  if (spec.max_shards > 0) n = std::min<int64_t>(n, spec.max_shards);
  if (spec.kind == Kind::kAuto) {
    n = std::max(n, FewestShardsOfAtMost(rows, row_bytes, kAutoMaxShardBytes));
  }
  n = std::clamp<int64_t>(n, 1, rows);
  if (n > kMaxVariablesPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ","),
                                                   "] would be split into ", n, " shards; at most ",
                                                   kMaxVariablesPerRequest, " are allowed"));
  }

  std::vector<RowRange> ranges;
  ranges.reserve(static_cast<size_t>(n));
  const int64_t base = rows / n;
  const int64_t extra = rows % n;  // the first `extra` shards get one more row
  int64_t begin = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t end = begin + base + (i < extra ? 1 : 0);
    ranges.push_back({begin, end});
    begin = end;
  }
  return ranges;
}

absl::StatusOr<PlacementStrategy> ParsePlacement(const std::string& text) {
  if (text == "round_robin") return PlacementStrategy::kRoundRobin;
  if (text == "greedy") return PlacementStrategy::kGreedyBytes;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown placement \"", text, "\": expected round_robin or greedy"));
}

std::vector<int> PlaceItems(const std::vector<int64_t>& bytes, int num_ps,
                            PlacementStrategy strategy, const std::vector<int64_t>& initial_load) {
  num_ps = std::max(num_ps, 1);
  std::vector<int> ps(bytes.size(), 0);
  if (strategy == PlacementStrategy::kRoundRobin) {
    for (size_t i = 0; i < bytes.size(); ++i) ps[i] = static_cast<int>(i % num_ps);
    return ps;
  }
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto size = [&](size_t i) { return std::max<int64_t>(bytes[i], 0); };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return size(a) > size(b); });
  // Min-heap of (load, ps): the least-loaded PS on top, the lowest index among equal loads.
  using Load = std::pair<int64_t, int>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (int p = 0; p < num_ps; ++p) {
    loads.push({p < static_cast<int>(initial_load.size()) ? initial_load[p] : 0, p});
  }
  for (size_t i : order) {
    auto [load, p] = loads.top();
    loads.pop();
    ps[i] = p;
    const int64_t s = size(i);
    loads.push({load > kMaxInt64 - s ? kMaxInt64 : load + s, p});
  }
  return ps;
}

std::string TextColumns(const std::vector<std::vector<std::string>>& rows,
                        const std::vector<size_t>& right_aligned) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  auto right = [&](size_t i) {
    return std::find(right_aligned.begin(), right_aligned.end(), i) != right_aligned.end();
  };
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string pad(width[i] - row[i].size(), ' ');
      const bool last = i + 1 == row.size();
      absl::StrAppend(&out, right(i) ? pad : "", row[i], !right(i) && !last ? pad : "",
                      last ? "\n" : "  ");
    }
  }
  return out;
}

std::string PlacementTable(const std::vector<std::string>& names,
                           const std::vector<std::vector<int64_t>>& shapes,
                           const std::vector<int>& ps, int num_ps) {
  const size_t n = std::min({names.size(), shapes.size(), ps.size()});
  num_ps = std::max(num_ps, 0);
  std::vector<int64_t> item_bytes(n);
  std::vector<std::vector<std::string>> rows = {{"name", "shape", "bytes", "ps"}};
  for (size_t i = 0; i < n; ++i) {
    item_bytes[i] = ShapeBytes(shapes[i]);
    rows.push_back({names[i], absl::StrCat("[", absl::StrJoin(shapes[i], ","), "]"),
                    absl::StrCat(item_bytes[i]), absl::StrCat(ps[i])});
  }
  std::string out = TextColumns(rows, /*right_aligned=*/{2});
  std::vector<int64_t> totals(static_cast<size_t>(num_ps), 0);
  std::vector<int> counts(static_cast<size_t>(num_ps), 0);
  int64_t total = 0;
  int placed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (ps[i] < 0 || ps[i] >= num_ps) continue;
    totals[ps[i]] += item_bytes[i];
    ++counts[ps[i]];
    ++placed;
    total += item_bytes[i];
  }
  for (int p = 0; p < num_ps; ++p) {
    const double pct = total > 0 ? 100.0 * static_cast<double>(totals[p]) / total : 0.0;
    absl::StrAppendFormat(&out, "ps %d: %d items, %d bytes (%s, %.1f%%)\n", p, counts[p], totals[p],
                          HumanBytes(totals[p]), pct);
  }
  absl::StrAppendFormat(&out, "total: %d items, %d bytes (%s) on %d ps\n", placed, total,
                        HumanBytes(total), num_ps);
  return out;
}

}  // namespace pstrain
