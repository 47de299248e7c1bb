// Internal to fuzz/: what the targets over the text readers (src/data: CSV, LibSVM, Criteo)
// share: the reader's options drawn from the input's first byte, and the checks every table a
// reader returns must pass.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "data/data.h"
#include "fuzz_util.h"

namespace pstrain::fuzz {

// The options a worker reads its shard with: bit 0 skips bad lines, bits 1-3 pick the first
// record, bits 4-6 the number of records (7: to the end).
inline TextOptions TextOptionsFrom(uint8_t b) {
  TextOptions o;
  o.bad_lines = (b & 1) ? TextOptions::BadLines::kSkip : TextOptions::BadLines::kStop;
  o.first_record = (b >> 1) & 7;
  const int count = (b >> 4) & 7;
  o.end_record = count == 7 ? -1 : o.first_record + count;
  return o;
}

// A table that holds together: rows of dense_dim floats, sparse offsets from 0 rising to the
// number of keys, one value and field per key, and at most the records asked for.
inline void CheckExamples(const Examples& e, const TextOptions& o) {
  const int64_t rows = e.size();
  FUZZ_CHECK(e.dense_dim >= 0 && e.dense.size() == static_cast<size_t>(rows * e.dense_dim),
             "dense rows");
  FUZZ_CHECK(e.sparse_offsets.size() == static_cast<size_t>(rows + 1) &&
                 e.sparse_offsets.front() == 0 &&
                 e.sparse_offsets.back() == static_cast<int64_t>(e.sparse_keys.size()),
             "sparse offsets");
  for (int64_t r = 0; r < rows; ++r) {
    FUZZ_CHECK(e.sparse_offsets[r] <= e.sparse_offsets[r + 1], "sparse offsets rise");
  }
  FUZZ_CHECK(e.sparse_values.size() == e.sparse_keys.size() &&
                 e.sparse_fields.size() == e.sparse_keys.size(),
             "one value and field per key");
  FUZZ_CHECK(e.records.empty() || e.records.size() == static_cast<size_t>(rows), "records");
  for (size_t i = 0; i < e.records.size(); ++i) {
    FUZZ_CHECK(e.records[i] >= o.first_record && (i == 0 || e.records[i] > e.records[i - 1]),
               "records rise from the first asked for");
  }
  if (o.end_record >= 0) {
    FUZZ_CHECK(rows + e.bad_lines_skipped <= o.end_record - o.first_record, "records asked for");
  }
  FUZZ_CHECK(e.bad_lines_skipped == 0 || o.bad_lines == TextOptions::BadLines::kSkip,
             "lines skipped under kStop");
}

// Runs `read(path, options)` on the input after its first byte, written to a file, and checks
// what it returns; `name` is the file's name (its suffix does not matter to the readers).
template <typename Read>
void FuzzTextReader(const uint8_t* data, size_t size, const std::string& name, Read&& read) {
  if (size == 0) return;
  const TextOptions options = TextOptionsFrom(data[0]);
  const std::string path = WriteTempFile(name, {reinterpret_cast<const char*>(data) + 1, size - 1});
  absl::StatusOr<Examples> e = read(path, options);
  if (!e.ok()) {
    const absl::StatusCode code = e.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kDataLoss,
               e.status().ToString());
    FUZZ_CHECK(e.status().message().find(path) != std::string::npos, "the error names the file");
    return;
  }
  CheckExamples(*e, options);
  absl::StatusOr<int64_t> records = CountRecords(path);
  if (!records.ok()) {
    // A damaged compressed file: the records asked for ended before the damage, the count of
    // the whole file meets it (as a job's start does), and names the file.
    FUZZ_CHECK(records.status().code() == absl::StatusCode::kDataLoss &&
                   records.status().message().find(path) != std::string::npos,
               records.status().ToString());
    return;
  }
  FUZZ_CHECK(*records >= e->size(), "CountRecords counts every row");
}

}  // namespace pstrain::fuzz
