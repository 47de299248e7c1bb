// A table read through a schema (a CSV file, Criteo's TSV or a LibSVM file): its header, a
// schema inferred from it, the statistics of its training rows, and its rows as a model's inputs.
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
std::string Named(const CsvTable& table) {
  const std::vector<std::string>& names = table.header.names;
  if (table.header.in_file || names.empty()) return "";
  if (table.layout.libsvm) {
    if (names.size() == 1) return " (the LibSVM file has no feature indices: only a label)";
    return absl::StrCat(" (a LibSVM file's columns are label and ", names[1], " to ", names.back(),
                        ", by feature index)");
  }
  if (table.layout.names.empty()) {
    return absl::StrCat(
        " (the file has no header: its first line is all numbers, so its columns "
        "are named c1 to c",
        names.size(), ")");
  }
  if (names.size() < 2) return absl::StrCat(" (the format names its column ", names[0], ")");
  return absl::StrCat(" (the format names its columns ", names.front(), ", ", names[1], ", ... ",
                      names.back(), ")");
}

// A LibSVM line as the fields of a row of `layout`'s columns: the label, then each column's
// value, "0" where the line has no such index. Indices outside the columns are dropped.
class LibSvmRow {
 public:
  explicit LibSvmRow(const CsvLayout& layout)
      : first_(layout.first_index), fields_(layout.names.size(), kZero) {}

  absl::Status Set(absl::string_view line) {
    for (size_t i : set_) fields_[i] = kZero;
    set_.clear();
    absl::string_view label;
    if (absl::Status s = SplitLibSvmLine(line, &label, &features_); !s.ok()) return s;
    fields_[0] = label;
    for (const LibSvmFeature& f : features_) {
      if (f.index < first_ || f.index - first_ + 1 >= fields_.size()) continue;
      const size_t column = f.index - first_ + 1;
      fields_[column] = f.value;
      set_.push_back(column);
    }
    return absl::OkStatus();
  }
  const std::vector<absl::string_view>& fields() const { return fields_; }

 private:
  static constexpr absl::string_view kZero = "0";
  uint64_t first_;
  std::vector<absl::string_view> fields_;
  std::vector<size_t> set_;  // the columns the last line set, put back to "0" by the next
  std::vector<LibSvmFeature> features_;
};

// Calls `fn` with the fields, line and record number of every row of `table` in `options`' range
// (ForEachCsvRecord: the count of rows skipped under kSkip, or the first error). A LibSVM line
// that is not one is refused naming its file and line.
absl::StatusOr<int64_t> ForEachRow(const CsvTable& table, const TextOptions& options,
                                   const CsvRangeFn& fn) {
  const TextOptions rows = RowsOf(options, table.header);
  if (!table.layout.libsvm) return ForEachCsvRecord(table.path, table.layout.delimiter, rows, fn);
  LibSvmRow row(table.layout);
  return ForEachLine(table.path, rows, [&](absl::string_view text, int64_t line, int64_t record) {
    if (absl::Status s = row.Set(text); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(table.path, ":", line, ": ", s.message()));
    }
    return fn(row.fields(), line, record);
  });
}

// The columns of the LibSVM file `path`: the label and f<first index> to f<last index>, from one
// pass over its well-formed features (a bad line is left to the passes that read the rows).
absl::StatusOr<CsvTable> LibSvmTable(const std::string& path, CsvLayout layout) {
  CsvTable table{path, layout, {}};
  table.header.in_file = false;
  const bool named = !layout.names.empty();
  uint64_t lowest = UINT64_MAX, highest = 0;
  int64_t records = 0;
  std::vector<LibSvmFeature> features;
  TextOptions scan;
  if (named) scan.end_record = 1;  // the columns are known: only whether there is a row
  absl::StatusOr<int64_t> read =
      ForEachLine(path, scan, [&](absl::string_view line, int64_t, int64_t) {
        ++records;
        absl::string_view label;
        if (SplitLibSvmLine(line, &label, &features).ok() && !features.empty()) {
          lowest = std::min(lowest, features.front().index);
          highest = std::max(highest, features.back().index);
        }
        return absl::OkStatus();
      });
  if (!read.ok()) return read.status();
  if (records == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (a LibSVM file of rows)"));
  }
  if (named) {
    table.header.names = layout.names;
    return table;
  }
  const uint64_t first = std::min<uint64_t>(lowest, 1);
  if (highest >= first + kMaxLibSvmColumns) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": feature indices up to ", highest, ", more than the ", kMaxLibSvmColumns,
        " columns (indices from 0 or 1 to the highest) a schema reads from a LibSVM file; its "
        "features are sparse: train on it "
        "without --schema (--data libsvm:",
        path, " reads them as sparse features)"));
  }
  table.layout = LibSvmLayout(first, lowest == UINT64_MAX ? 0 : highest - first + 1);
  table.header.names = table.layout.names;
  return table;
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
// the rows of records [0, options.end_record) of `table`, and returns its Finish(); errors name
// the file.
template <typename Create>
auto OnePass(const CsvTable& table, const TextOptions& options, const Create& create)
    -> decltype(create({})->Finish()) {
  auto builder = create(table.header.names);
  if (!builder.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(table.path, ": ", builder.status().message(), Named(table)));
  }
  RowPlace place(table.path);
  absl::StatusOr<int64_t> read = ForEachRow(
      table, options, [&](const std::vector<absl::string_view>& fields, int64_t line, int64_t) {
        return builder->Add(fields, place.At(line));
      });
  if (!read.ok()) return read.status();
  auto got = builder->Finish();
  if (!got.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(table.path, ": ", got.status().message()));
  }
  return got;
}

}  // namespace

CsvLayout LibSvmLayout(uint64_t first_index, int64_t features) {
  CsvLayout layout('\t');
  layout.libsvm = true;
  layout.first_index = first_index;
  layout.names.push_back("label");
  for (int64_t i = 0; i < features; ++i) layout.names.push_back(absl::StrCat("f", first_index + i));
  return layout;
}

absl::StatusOr<CsvLayout> TableLayout(const DataSpec& spec) {
  if (spec.format == DataSpec::Format::kCsv) return CsvLayout(',');
  if (spec.format == DataSpec::Format::kLibSvm) {
    CsvLayout libsvm('\t');
    libsvm.libsvm = true;
    return libsvm;  // its columns are found when the table is opened
  }
  if (spec.format != DataSpec::Format::kCriteo) {
    return absl::InvalidArgumentError(
        absl::StrCat("a schema reads CSV files (csv:PATH), LibSVM files (libsvm:PATH) and "
                     "Criteo's TSV (criteo:PATH), not ",
                     spec.ToString()));
  }
  CsvLayout criteo('\t');
  criteo.names.push_back("label");
  for (int i = 1; i <= kCriteoDense; ++i) criteo.names.push_back(absl::StrCat("I", i));
  for (int i = 1; i <= kCriteoCategorical; ++i) criteo.names.push_back(absl::StrCat("C", i));
  return criteo;
}

absl::StatusOr<CsvTable> OpenCsvTable(const std::string& path, const CsvLayout& layout) {
  if (layout.libsvm) return LibSvmTable(path, layout);
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
  return CsvTable{path, layout, *std::move(header)};
}

absl::StatusOr<InferredSchema> InferCsvSchema(const CsvTable& table, absl::string_view label,
                                              TextOptions options, bool integer_codes) {
  return OnePass(table, options, [&](const std::vector<std::string>& header) {
    return SchemaInferrer::Create(header, label, integer_codes);
  });
}

absl::StatusOr<FeatureStats> ComputeCsvStats(const Schema& schema, const CsvTable& table,
                                             TextOptions options) {
  return OnePass(table, options, [&](const std::vector<std::string>& header) {
    return StatsBuilder::Create(schema, header);
  });
}

absl::StatusOr<Transform> CsvTransform(Schema schema, FeatureStats stats, const CsvTable& table) {
  absl::StatusOr<Transform> t =
      Transform::Create(std::move(schema), std::move(stats), table.header.names);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(table.path, ": ", t.status().message(), Named(table)));
  }
  return t;
}

absl::StatusOr<Examples> ReadCsvThrough(const Transform& transform, const CsvTable& table,
                                        const TextOptions& options) {
  Examples out;
  out.dense_dim = transform.shape().dense_features;
  RowPlace place(table.path);
  absl::StatusOr<int64_t> skipped =
      ForEachRow(table, options,
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
