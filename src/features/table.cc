// A CSV table read through a schema: its header, a schema inferred from it, the statistics of
// its training rows, and its rows as a model's inputs.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "features/features.h"
#include "features/field.h"

namespace pstrain {
namespace {

// `options` past the header: record 0 is not a row when it is the header.
TextOptions RowsOf(TextOptions options, const CsvHeader& header) {
  if (header.in_file) options.first_record = std::max<int64_t>(options.first_record, 1);
  return options;
}

// What a schema's names were matched against, for an error of a file without a header.
std::string Named(const CsvHeader& header) {
  if (header.in_file) return "";
  return absl::StrCat(
      " (the file has no header: its first line is all numbers, so its columns "
      "are named c1 to c",
      header.names.size(), ")");
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

// Builds what `create` makes of the header's names (a SchemaInferrer or a StatsBuilder) from
// the rows of records [0, options.end_record) of `path`, and returns its Finish(); errors name
// the file.
template <typename Create>
auto OnePass(const std::string& path, const CsvLayout& layout, const TextOptions& options,
             const Create& create) -> decltype(create({})->Finish()) {
  absl::StatusOr<CsvHeader> header = ReadCsvHeader(path, layout);
  if (!header.ok()) return header.status();
  auto builder = create(header->names);
  if (!builder.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", builder.status().message(), Named(*header)));
  }
  RowPlace place(path);
  absl::StatusOr<int64_t> read =
      ForEachCsvRecord(path, layout.delimiter, RowsOf(options, *header),
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

absl::StatusOr<CsvLayout> TableLayout(const DataSpec& spec) {
  if (spec.format == DataSpec::Format::kCsv) return CsvLayout(',');
  if (spec.format != DataSpec::Format::kCriteo) {
    return absl::InvalidArgumentError(
        absl::StrCat("a schema reads CSV files (csv:PATH) and Criteo's TSV (criteo:PATH), not ",
                     spec.ToString()));
  }
  CsvLayout criteo('\t');
  criteo.names.push_back("label");
  for (int i = 1; i <= kCriteoDense; ++i) criteo.names.push_back(absl::StrCat("I", i));
  for (int i = 1; i <= kCriteoCategorical; ++i) criteo.names.push_back(absl::StrCat("C", i));
  return criteo;
}

absl::StatusOr<CsvHeader> ReadCsvHeader(const std::string& path, const CsvLayout& layout) {
  std::optional<CsvHeader> header;
  TextOptions first;
  first.end_record = 1;
  absl::StatusOr<int64_t> read = ForEachCsvRecord(
      path, layout.delimiter, first,
      [&](const std::vector<absl::string_view>& fields, int64_t, int64_t) {
        header.emplace();
        if (!layout.names.empty()) {  // the format's own names; every record is a row
          header->names = layout.names;
          header->in_file = false;
          return absl::OkStatus();
        }
        // Rows: numbers and missing values, at least one number.
        bool numbers = false, rows = true;
        for (absl::string_view f : fields) {
          const bool number = features_internal::ParseNumber(f).has_value();
          numbers |= number;
          rows &= number || IsMissing(f);
        }
        header->in_file = !(rows && numbers);
        for (size_t i = 0; i < fields.size(); ++i) {
          header->names.push_back(header->in_file ? std::string(fields[i])
                                                  : absl::StrCat("c", i + 1));
        }
        return absl::OkStatus();
      });
  if (!read.ok()) return read.status();
  if (!header.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (a CSV file of rows)"));
  }
  return *std::move(header);
}

absl::StatusOr<InferredSchema> InferCsvSchema(const std::string& path, const CsvLayout& layout,
                                              absl::string_view label, TextOptions options,
                                              bool integer_codes) {
  return OnePass(path, layout, options, [&](const std::vector<std::string>& header) {
    return SchemaInferrer::Create(header, label, integer_codes);
  });
}

absl::StatusOr<FeatureStats> ComputeCsvStats(const Schema& schema, const std::string& path,
                                             const CsvLayout& layout, TextOptions options) {
  return OnePass(path, layout, options, [&](const std::vector<std::string>& header) {
    return StatsBuilder::Create(schema, header);
  });
}

absl::StatusOr<Transform> CsvTransform(Schema schema, FeatureStats stats, const std::string& path,
                                       const CsvLayout& layout) {
  absl::StatusOr<CsvHeader> header = ReadCsvHeader(path, layout);
  if (!header.ok()) return header.status();
  absl::StatusOr<Transform> t =
      Transform::Create(std::move(schema), std::move(stats), header->names);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", t.status().message(), Named(*header)));
  }
  return t;
}

absl::StatusOr<Examples> ReadCsvThrough(const Transform& transform, const std::string& path,
                                        const CsvLayout& layout, const TextOptions& options) {
  Examples out;
  out.dense_dim = transform.shape().dense_features;
  // Only a range from record 0 asks whether that record is the header.
  CsvHeader header;
  if (options.first_record <= 0) {
    absl::StatusOr<CsvHeader> h = ReadCsvHeader(path, layout);
    if (!h.ok()) return h.status();
    header.in_file = h->in_file;
  }
  RowPlace place(path);
  absl::StatusOr<int64_t> skipped = ForEachCsvRecord(
      path, layout.delimiter, RowsOf(options, header),
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
