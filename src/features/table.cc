// A CSV table read through a schema: its header, a schema inferred from it, the statistics of
// its training rows, and its rows as a model's inputs.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "features/features.h"

namespace pstrain {
namespace {

// `options` past the header: record 0 is never a row.
TextOptions RowsOf(TextOptions options) {
  options.first_record = std::max<int64_t>(options.first_record, 1);
  return options;
}

// "path:line" of each row, in one buffer reused from row to row: a row's errors name it, and
// most rows have none, so no row pays for a string of its own.
class RowPlace {
 public:
  explicit RowPlace(const std::string& path) : text_(path + ":"), prefix_(text_.size()) {}
  const std::string& At(int64_t line) {
    text_.resize(prefix_);
    absl::StrAppend(&text_, line);
    return text_;
  }

 private:
  std::string text_;
  size_t prefix_;
};

// Builds what `create` makes of the header (a SchemaInferrer or a StatsBuilder) from the rows
// of records [1, options.end_record) of `path`, and returns its Finish(); errors name the file.
template <typename Create>
auto OnePass(const std::string& path, char delimiter, const TextOptions& options,
             const Create& create) -> decltype(create({})->Finish()) {
  absl::StatusOr<std::vector<std::string>> header = ReadCsvHeader(path, delimiter);
  if (!header.ok()) return header.status();
  auto builder = create(*header);
  if (!builder.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", builder.status().message()));
  }
  RowPlace place(path);
  absl::StatusOr<int64_t> read =
      ForEachCsvRecord(path, delimiter, RowsOf(options),
                       [&](const std::vector<absl::string_view>& fields, int64_t line, int64_t) {
                         return builder->Add(fields, place.At(line));
                       });
  if (!read.ok()) return read.status();
  auto got = builder->Finish();
  if (!got.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", got.status().message()));
  }
  return got;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadCsvHeader(const std::string& path, char delimiter) {
  std::optional<std::vector<std::string>> header;
  TextOptions first;
  first.end_record = 1;
  absl::StatusOr<int64_t> read = ForEachCsvRecord(
      path, delimiter, first, [&](const std::vector<absl::string_view>& fields, int64_t, int64_t) {
        header.emplace(fields.begin(), fields.end());
        return absl::OkStatus();
      });
  if (!read.ok()) return read.status();
  if (!header.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": empty file (a CSV file with a header naming its columns)"));
  }
  return *std::move(header);
}

absl::StatusOr<InferredSchema> InferCsvSchema(const std::string& path, char delimiter,
                                              absl::string_view label, TextOptions options,
                                              bool integer_codes) {
  return OnePass(path, delimiter, options, [&](const std::vector<std::string>& header) {
    return SchemaInferrer::Create(header, label, integer_codes);
  });
}

absl::StatusOr<FeatureStats> ComputeCsvStats(const Schema& schema, const std::string& path,
                                             char delimiter, TextOptions options) {
  return OnePass(path, delimiter, options, [&](const std::vector<std::string>& header) {
    return StatsBuilder::Create(schema, header);
  });
}

absl::StatusOr<Transform> CsvTransform(Schema schema, FeatureStats stats, const std::string& path,
                                       char delimiter) {
  absl::StatusOr<std::vector<std::string>> header = ReadCsvHeader(path, delimiter);
  if (!header.ok()) return header.status();
  absl::StatusOr<Transform> t = Transform::Create(std::move(schema), std::move(stats), *header);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::StatusOr<Examples> ReadCsvThrough(const Transform& transform, const std::string& path,
                                        char delimiter, const TextOptions& options) {
  Examples out;
  out.dense_dim = transform.shape().dense_features;
  RowPlace place(path);
  absl::StatusOr<int64_t> skipped = ForEachCsvRecord(
      path, delimiter, RowsOf(options),
      [&](const std::vector<absl::string_view>& fields, int64_t line, int64_t record) {
        absl::Status s = transform.Append(fields, place.At(line), &out);
        if (s.ok()) out.records.push_back(record);
        return s;
      });
  if (!skipped.ok()) return skipped.status();
  out.bad_lines_skipped = *skipped;
  return out;
}

}  // namespace pstrain
