// Feature columns (features/features.h) on any schema and any rows: the schema's JSON reader,
// the CSV record splitter (data/data.h SplitCsvRecord), the statistics and the transform. A
// schema accepted survives ToJson and FromJson unchanged; a row is refused with
// InvalidArgument naming where it is, or appends exactly one row.
//   input: the schema (JSON), then kSeparator-separated CSV lines: the first is the header,
//   the others are rows, first the training rows' statistics, then their transform
#include <string>

#include "data/data.h"
#include "features/features.h"
#include "fuzz_util.h"
#include "schema_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const std::vector<std::string_view> parts =
      fuzz::SplitMessages(std::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<Schema> schema =
      Schema::FromJson(absl::string_view(parts[0].data(), parts[0].size()), "schema.json");
  if (!fuzz::CheckSchemaAnswer(schema, "schema.json") || parts.size() < 2) return 0;

  std::vector<std::vector<std::string>> lines;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::vector<std::string> fields;
    absl::Status s =
        SplitCsvRecord(absl::string_view(parts[i].data(), parts[i].size()), ',', &fields);
    FUZZ_CHECK(s.ok() || s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
    FUZZ_CHECK(!s.ok() || !fields.empty(), "a record has at least one field");
    if (s.ok()) lines.push_back(std::move(fields));
  }
  if (lines.empty()) return 0;
  absl::StatusOr<StatsBuilder> stats = StatsBuilder::Create(*schema, lines[0]);
  if (!stats.ok()) return 0;
  auto views = [](const std::vector<std::string>& fields) {
    return std::vector<absl::string_view>(fields.begin(), fields.end());
  };
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::Status s = stats->Add(views(lines[i]), "rows.csv:1");
    FUZZ_CHECK(s.ok() || (s.code() == absl::StatusCode::kInvalidArgument &&
                          s.message().rfind("rows.csv:1: ", 0) == 0),
               s.ToString());
  }
  absl::StatusOr<FeatureStats> fitted = stats->Finish();
  if (!fitted.ok()) return 0;
  absl::StatusOr<FeatureStats> read = FeatureStats::FromJson(fitted->ToJson(), "stats");
  FUZZ_CHECK(read.ok() && read->ToJson() == fitted->ToJson(), "the statistics' JSON round trip");
  absl::StatusOr<Transform> transform = Transform::Create(*schema, *fitted, lines[0]);
  FUZZ_CHECK(transform.ok(), transform.status().ToString());
  Examples out;
  out.dense_dim = transform->shape().dense_features;
  for (size_t i = 1; i < lines.size(); ++i) {
    const int64_t before = out.size();
    absl::Status s = transform->Append(views(lines[i]), "rows.csv:1", &out);
    FUZZ_CHECK(s.ok() || s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
    FUZZ_CHECK(out.size() == before + (s.ok() ? 1 : 0), "one row appended, or none");
    FUZZ_CHECK(out.dense.size() == static_cast<size_t>(out.size() * out.dense_dim),
               "dense_features floats per row");
    FUZZ_CHECK(out.sparse_keys.size() ==
                   static_cast<size_t>(out.size() * transform->shape().categorical_fields),
               "one key per categorical field per row");
  }
  return 0;
}
