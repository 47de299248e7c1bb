// Readers of line-oriented text formats: CSV, LibSVM and the Criteo TSV layout. Each line is
// parsed into an Examples table; a bad line is an error naming the file and line, or is skipped
// and counted (TextOptions::bad_lines).
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "data/data.h"
#include "data/files.h"

namespace pstrain {
namespace {

// Lines of a plain or gzip-compressed file (zlib reads a plain file as it is).
class LineReader {
 public:
  ~LineReader() {
    if (gz_ != nullptr) gzclose(gz_);
  }
  absl::Status Open(const std::string& path) {
    path_ = path;
    if (absl::Status s = CheckIsFile(path, "a data file"); !s.ok()) return s;
    gz_ = gzopen(path.c_str(), "rb");
    if (gz_ == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
    gzbuffer(gz_, 1 << 18);
    return absl::OkStatus();
  }
  // The next line without its end ("\n" or "\r\n"); false at the end of the file or on an error.
  bool Next(std::string* line) {
    line->clear();
    char buf[1 << 16];
    while (gzgets(gz_, buf, sizeof(buf)) != nullptr) {
      line->append(buf);
      if (!line->empty() && line->back() == '\n') break;
    }
    if (line->empty()) return false;
    ++number_;
    if (line->back() == '\n') line->pop_back();
    if (!line->empty() && line->back() == '\r') line->pop_back();
    return true;
  }
  absl::Status FinalStatus() const {
    int err = Z_OK;
    const char* msg = gzerror(gz_, &err);
    if (err != Z_OK && err != Z_STREAM_END) {
      return absl::DataLossError(absl::StrCat(path_, ": read error after line ", number_, ": ",
                                              msg == nullptr ? "" : msg));
    }
    return absl::OkStatus();
  }
  int64_t number() const { return number_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  int64_t number_ = 0;
};

bool IsBlank(absl::string_view line) { return absl::StripAsciiWhitespace(line).empty(); }

// Files saved by spreadsheets start with it; it is not part of the first record.
constexpr absl::string_view kByteOrderMark = "\xEF\xBB\xBF";

// Builds an Examples table row by row; a row is either finished or dropped as a whole.
class TableBuilder {
 public:
  explicit TableBuilder(int dense_dim) { out_.dense_dim = dense_dim; }
  void AddDense(float v) { out_.dense.push_back(v); }
  void AddSparse(uint64_t key, float value, int32_t field) {
    out_.sparse_keys.push_back(key);
    out_.sparse_values.push_back(value);
    out_.sparse_fields.push_back(field);
  }
  void FinishRow(float label) {
    out_.labels.push_back(label);
    out_.sparse_offsets.push_back(static_cast<int64_t>(out_.sparse_keys.size()));
    row_dense_ = out_.dense.size();
  }
  // Forgets what the current row added.
  void DropRow() {
    out_.dense.resize(row_dense_);
    const size_t keep = static_cast<size_t>(out_.sparse_offsets.back());
    out_.sparse_keys.resize(keep);
    out_.sparse_values.resize(keep);
    out_.sparse_fields.resize(keep);
  }
  // The row just finished came from `record`: kept in `records` once rows and records part
  // (before that, row r is record first + r).
  void RowFrom(int64_t record, int64_t first) {
    const int64_t row = out_.size() - 1;
    if (out_.records.empty() && record == first + row) return;
    if (out_.records.empty()) {
      out_.records.resize(row);
      std::iota(out_.records.begin(), out_.records.end(), first);
    }
    out_.records.push_back(record);
  }
  Examples Finish(int64_t skipped) {
    out_.bad_lines_skipped = skipped;
    return std::move(out_);
  }

 private:
  size_t row_dense_ = 0;
  Examples out_;
};

// Runs `parse_line` over the records of `path` in `options`' range (ForEachLine). A line whose
// parse fails stops the read with an error "path:line: what", or is dropped and counted under
// BadLines::kSkip. `parse_line` returns false for a line it consumed without producing a row (a
// header).
template <typename ParseLine>
absl::StatusOr<Examples> ReadLines(const std::string& path, const TextOptions& options,
                                   TableBuilder* table, ParseLine parse_line) {
  absl::StatusOr<int64_t> skipped =
      ForEachLine(path, options, [&](absl::string_view line, int64_t number, int64_t record) {
        absl::StatusOr<bool> row = parse_line(line, number);
        if (row.ok()) {
          if (*row) table->RowFrom(record, std::max<int64_t>(options.first_record, 0));
          return absl::OkStatus();
        }
        table->DropRow();
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", number, ": ", row.status().message()));
      });
  if (!skipped.ok()) return skipped.status();
  return table->Finish(*skipped);
}

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(what); }

bool ParseFloat(absl::string_view text, float* out) {
  return absl::SimpleAtof(absl::StripAsciiWhitespace(text), out) && std::isfinite(*out);
}

// splitmix64's finaliser: spreads (field, value) pairs over all 64 bits.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

absl::Status SplitCsvRecord(absl::string_view line, char delimiter,
                            std::vector<std::string>* fields) {
  fields->clear();
  std::string field;
  size_t i = 0;
  while (true) {
    field.clear();
    // A field that starts with a quote (after spaces) runs to the matching one; "" inside it
    // is a quote. Otherwise it runs to the delimiter, spaces kept.
    // (With a space as the delimiter, spaces separate fields and are never skipped.)
    const bool skip_spaces = delimiter != ' ';
    size_t start = i;
    while (skip_spaces && start < line.size() && line[start] == ' ') ++start;
    if (start < line.size() && line[start] == '"') {
      size_t j = start + 1;
      while (true) {
        if (j >= line.size())
          return Bad(absl::StrCat("field ", fields->size() + 1,
                                  ": a quote that is not closed on this line"));
        if (line[j] == '"') {
          if (j + 1 < line.size() && line[j + 1] == '"') {
            field.push_back('"');
            j += 2;
            continue;
          }
          break;
        }
        field.push_back(line[j++]);
      }
      i = j + 1;
      while (skip_spaces && i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] != delimiter) {
        return Bad(absl::StrCat("field ", fields->size() + 1, ": text after its closing quote"));
      }
    } else {
      const size_t end = line.find(delimiter, i);
      const absl::string_view rest =
          line.substr(i, end == absl::string_view::npos ? line.size() - i : end - i);
      field.assign(rest.data(), rest.size());
      i = end == absl::string_view::npos ? line.size() : end;
    }
    fields->push_back(field);
    if (i >= line.size()) return absl::OkStatus();
    ++i;  // the delimiter
  }
}

absl::StatusOr<int64_t> ForEachLine(const std::string& path, const TextOptions& options,
                                    const LineRangeFn& fn) {
  LineReader in;
  if (absl::Status s = in.Open(path); !s.ok()) return s;
  std::string text;
  int64_t record = -1, skipped = 0;
  while ((options.end_record < 0 || record + 1 < options.end_record) && in.Next(&text)) {
    absl::string_view line = text;
    if (in.number() == 1) absl::ConsumePrefix(&line, kByteOrderMark);
    if (IsBlank(line)) continue;
    if (++record < options.first_record) continue;
    absl::Status s = fn(line, in.number(), record);
    if (s.ok()) continue;
    if (options.bad_lines == TextOptions::BadLines::kSkip &&
        s.code() == absl::StatusCode::kInvalidArgument) {
      ++skipped;
      continue;
    }
    return s;
  }
  if (absl::Status s = in.FinalStatus(); !s.ok()) return s;
  return skipped;
}

absl::StatusOr<int64_t> ForEachCsvRecord(const std::string& path, char delimiter,
                                         const TextOptions& options, const CsvRangeFn& fn) {
  if (delimiter == '"' || delimiter == '\n' || delimiter == '\r') {
    return absl::InvalidArgumentError("a quote or a line end cannot be the delimiter");
  }
  std::vector<std::string> fields;
  std::vector<absl::string_view> views;
  return ForEachLine(path, options, [&](absl::string_view line, int64_t number, int64_t record) {
    if (absl::Status s = SplitCsvRecord(line, delimiter, &fields); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", s.message()));
    }
    views.assign(fields.begin(), fields.end());
    return fn(views, number, record);
  });
}

absl::Status ForEachCsvRecord(const std::string& path, char delimiter, const CsvRecordFn& fn) {
  return ForEachCsvRecord(path, delimiter, TextOptions{},
                          [&fn](const std::vector<absl::string_view>& fields, int64_t line,
                                int64_t) { return fn(fields, line); })
      .status();
}

uint64_t CategoricalKey(int field, uint32_t value, bool missing) {
  const uint64_t v = missing ? (uint64_t{1} << 32) : value;
  return Mix((static_cast<uint64_t>(field) << 33) | v);
}

absl::StatusOr<int64_t> CountRecords(const std::string& path) {
  int64_t records = 0;
  absl::StatusOr<int64_t> read =
      ForEachLine(path, TextOptions{}, [&](absl::string_view, int64_t, int64_t) {
        ++records;
        return absl::OkStatus();
      });
  if (!read.ok()) return read.status();
  return records;
}

absl::StatusOr<Examples> ReadCsv(const std::string& path, const CsvOptions& csv,
                                 const TextOptions& options) {
  // The first line fixes the number of columns; it is a header if asked, or (kAuto) if any of
  // its fields is not a number.
  LineReader probe;
  if (absl::Status s = probe.Open(path); !s.ok()) return s;
  std::string first;
  if (!probe.Next(&first)) return Bad(absl::StrCat(path, ": empty file"));
  if (absl::StartsWith(first, kByteOrderMark)) first.erase(0, kByteOrderMark.size());
  const std::vector<absl::string_view> head = absl::StrSplit(first, csv.delimiter);
  const int columns = static_cast<int>(head.size());
  if (csv.label_column < 0 || csv.label_column >= columns) {
    return Bad(absl::StrCat(path, ": label column ", csv.label_column, " does not exist (", columns,
                            " columns)"));
  }
  bool header = csv.header == CsvOptions::Header::kYes;
  if (csv.header == CsvOptions::Header::kAuto) {
    for (absl::string_view f : head) {
      float v;
      if (!ParseFloat(f, &v)) header = true;
    }
  }
  TableBuilder table(columns - 1);
  return ReadLines(
      path, options, &table, [&](absl::string_view line, int64_t number) -> absl::StatusOr<bool> {
        if (number == 1 && header) return false;
        const std::vector<absl::string_view> fields = absl::StrSplit(line, csv.delimiter);
        if (static_cast<int>(fields.size()) != columns) {
          return Bad(absl::StrCat("expected ", columns, " fields, got ", fields.size()));
        }
        float label = 0;
        for (int c = 0; c < columns; ++c) {
          float v;
          if (!ParseFloat(fields[c], &v)) {
            return Bad(
                absl::StrCat("field ", c + 1, " \"", fields[c], "\" is not a finite number"));
          }
          if (c == csv.label_column) {
            label = v;
          } else {
            table.AddDense(v);
          }
        }
        table.FinishRow(label);
        return true;
      });
}

absl::Status SplitLibSvmLine(absl::string_view line, absl::string_view* label,
                             std::vector<LibSvmFeature>* features) {
  features->clear();
  const std::vector<absl::string_view> tokens =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  *label = tokens.empty() ? absl::string_view() : tokens[0];
  int64_t previous = -1;
  for (size_t i = 1; i < tokens.size(); ++i) {
    if (absl::StartsWith(tokens[i], "#")) break;  // a comment ends the line
    const size_t colon = tokens[i].find(':');
    uint64_t index = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(tokens[i].substr(0, colon), &index)) {
      return Bad(absl::StrCat("feature \"", tokens[i], "\" is not index:value"));
    }
    if (index > static_cast<uint64_t>(INT64_MAX) || static_cast<int64_t>(index) <= previous) {
      return Bad(absl::StrCat("feature index ", index, " is not above the previous one (", previous,
                              "): indices must be strictly increasing"));
    }
    previous = static_cast<int64_t>(index);
    features->push_back({index, tokens[i].substr(colon + 1), tokens[i]});
  }
  return absl::OkStatus();
}

absl::StatusOr<Examples> ReadLibSvm(const std::string& path, const TextOptions& options) {
  TableBuilder table(0);
  std::vector<LibSvmFeature> features;
  return ReadLines(
      path, options, &table, [&](absl::string_view line, int64_t) -> absl::StatusOr<bool> {
        absl::string_view label_text;
        if (absl::Status s = SplitLibSvmLine(line, &label_text, &features); !s.ok()) return s;
        float label;
        if (!ParseFloat(label_text, &label)) {
          return Bad(absl::StrCat("label \"", label_text, "\" is not a finite number"));
        }
        for (const LibSvmFeature& f : features) {
          float value;
          if (!ParseFloat(f.value, &value)) {
            return Bad(absl::StrCat("feature \"", f.token, "\": value \"", f.value,
                                    "\" is not a finite number"));
          }
          table.AddSparse(f.index, value, 0);
        }
        table.FinishRow(label);
        return true;
      });
}

absl::StatusOr<Examples> ReadCriteo(const std::string& path, const TextOptions& options) {
  TableBuilder table(kCriteoDense);
  constexpr int kFields = 1 + kCriteoDense + kCriteoCategorical;
  return ReadLines(
      path, options, &table, [&](absl::string_view line, int64_t) -> absl::StatusOr<bool> {
        const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
        if (fields.size() != kFields) {
          return Bad(absl::StrCat("expected ", kFields, " tab-separated fields (label, ",
                                  kCriteoDense, " integers, ", kCriteoCategorical,
                                  " categories), got ", fields.size()));
        }
        if (fields[0] != "0" && fields[0] != "1") {
          return Bad(absl::StrCat("label \"", fields[0], "\" is not 0 or 1"));
        }
        for (int i = 0; i < kCriteoDense; ++i) {
          absl::string_view f = fields[1 + i];
          int64_t v = 0;
          if (!f.empty() && !absl::SimpleAtoi(f, &v)) {
            return Bad(absl::StrCat("integer feature I", i + 1, " \"", f, "\" is not an integer"));
          }
          // Counts are heavy-tailed: log(1 + x), with missing and negative values as 0.
          table.AddDense(v > 0 ? static_cast<float>(std::log1p(static_cast<double>(v))) : 0.0f);
        }
        for (int i = 0; i < kCriteoCategorical; ++i) {
          absl::string_view f = fields[1 + kCriteoDense + i];
          uint32_t v = 0;
          if (!f.empty() && (f.size() != 8 || !absl::SimpleHexAtoi(f, &v))) {
            return Bad(
                absl::StrCat("categorical feature C", i + 1, " \"", f, "\" is not 8 hex digits"));
          }
          table.AddSparse(CategoricalKey(i, v, f.empty()), 1.0f, i);
        }
        table.FinishRow(fields[0] == "1" ? 1.0f : 0.0f);
        return true;
      });
}

}  // namespace pstrain
