#include "cli/infer_schema.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/data.h"
#include "features/features.h"

namespace pstrain {
namespace {

absl::StatusOr<InferredSchema> Infer(const std::string& data, const std::string& label,
                                     char delimiter) {
  absl::StatusOr<DataSpec> spec = DataSpec::Parse(data);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--data ", spec.status().message()));
  }
  absl::StatusOr<CsvLayout> layout = TableLayout(*spec);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--data ", data,
                                                   ": infer-schema reads csv:PATH "
                                                   "(a CSV file), libsvm:PATH (a LibSVM file) "
                                                   "or criteo:PATH (Criteo's TSV)"));
  }
  if (spec->format == DataSpec::Format::kCsv) layout->delimiter = delimiter;
  absl::StatusOr<CsvTable> table = OpenCsvTable(spec->path, *layout);
  if (!table.ok()) return table.status();
  return InferCsvSchema(*table, label, TextOptions{});
}

}  // namespace

InferSchemaCommand::InferSchemaCommand(CLI::App* app)
    : cmd_(app->add_subcommand("infer-schema",
                               "read a CSV file, a LibSVM file or Criteo's TSV and print a "
                               "schema of feature "
                               "columns for it, with the reason for each column's kind")) {
  cmd_->add_option("--data", data_,
                   "csv:PATH, a CSV file (plain or gzip) whose first line "
                   "names the columns (all numbers: no header, columns c1, c2, ...), "
                   "libsvm:PATH (columns label, f1 (or f0), f2, ... by feature index) or "
                   "criteo:PATH, Criteo's TSV (label, I1 to I13, C1 to C26)")
      ->required();
  cmd_->add_option("--label", label_, "the label column's name (default: the first column)");
  cmd_->add_option("--out", out_, "write the schema to this file instead of stdout");
  cmd_->add_option("--delimiter", delimiter_, "the field delimiter")->capture_default_str();
}

int InferSchemaCommand::Run() const {
  absl::StatusOr<InferredSchema> got = Infer(data_, label_, delimiter_);
  if (!got.ok()) {
    std::fprintf(stderr, "pstrain infer-schema: error: %s\n",
                 std::string(got.status().message()).c_str());
    return got.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  for (const std::string& why : got->reasons) std::fprintf(stderr, "# %s\n", why.c_str());
  const std::string json = got->schema.ToJson() + "\n";
  if (out_.empty()) {
    std::fputs(json.c_str(), stdout);
    return 0;
  }
  std::ofstream f(out_, std::ios::binary | std::ios::trunc);
  f << json;
  f.close();
  if (!f) {
    std::fprintf(stderr, "pstrain infer-schema: error: --out %s: cannot write\n", out_.c_str());
    return 1;
  }
  return 0;
}

}  // namespace pstrain
