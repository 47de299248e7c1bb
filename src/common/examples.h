// A table of examples: what the data readers produce and what a model trains on (a batch is a
// table of a few rows). Plain data, no behaviour, so that src/data and src/model share it without
// depending on each other.
#pragma once

#include <cstdint>
#include <vector>

namespace pstrain {

struct Examples {
  // Dense features, row-major: rows x dense_dim floats (dense_dim 0 when the format has none).
  int dense_dim = 0;
  std::vector<float> dense;
  // Row r's sparse features are [sparse_offsets[r], sparse_offsets[r + 1]); rows + 1 entries,
  // starting at 0.
  std::vector<int64_t> sparse_offsets = {0};
  std::vector<uint64_t> sparse_keys;   // a feature id: a LibSVM index, a hashed category
  std::vector<float> sparse_values;    // its value (1 for a category)
  std::vector<int32_t> sparse_fields;  // the column it came from (0 when there is one)
  std::vector<float> labels;           // one per row
  int64_t bad_lines_skipped = 0;       // lines a reader dropped as malformed
  // Per row, the record (counted from the file's first) it was read from, once some record gave
  // no row (a header, a bad line skipped); empty while row r is record `first_record + r`.
  std::vector<int64_t> records;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  const float* dense_row(int64_t r) const { return dense.data() + r * dense_dim; }

  // Appends row `r` of `from` (which must have the same dense_dim).
  void AppendRow(const Examples& from, int64_t r) {
    dense.insert(dense.end(), from.dense_row(r), from.dense_row(r) + dense_dim);
    const int64_t b = from.sparse_offsets[r], e = from.sparse_offsets[r + 1];
    sparse_keys.insert(sparse_keys.end(), from.sparse_keys.begin() + b,
                       from.sparse_keys.begin() + e);
    sparse_values.insert(sparse_values.end(), from.sparse_values.begin() + b,
                         from.sparse_values.begin() + e);
    sparse_fields.insert(sparse_fields.end(), from.sparse_fields.begin() + b,
                         from.sparse_fields.begin() + e);
    sparse_offsets.push_back(static_cast<int64_t>(sparse_keys.size()));
    labels.push_back(from.labels[r]);
  }
  // Empties the table, keeping its dense_dim and its memory.
  void Clear() {
    dense.clear();
    sparse_offsets.assign(1, 0);
    sparse_keys.clear();
    sparse_values.clear();
    sparse_fields.clear();
    labels.clear();
    records.clear();
  }
};

}  // namespace pstrain
