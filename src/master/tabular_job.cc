// The chief's part of a job on a CSV table read through a schema (--schema, docs/features.md):
// the schema (a file, or inferred from the training records), the statistics of the training
// records, and the held-out examples through them.
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "master/model_job.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

absl::StatusOr<std::string> ReadSchemaFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument("--schema ", path, ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidArgument("--schema ", path, ": cannot read");
  return text.str();
}

// The schema of --schema FILE (JSON, or YAML by the file's name).
absl::StatusOr<Schema> SchemaFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSchemaFile(path);
  if (!text.ok()) return text.status();
  const std::string source = absl::StrCat("--schema ", path);
  if (absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml")) {
    return Schema::FromYaml(*text, source);
  }
  if (!nlohmann::json::accept(*text)) {
    return InvalidArgument(source,
                           ": not valid JSON (a schema in YAML is read from a file "
                           "named *.yaml or *.yml)");
  }
  return Schema::FromJson(*text, source);
}

// The schema --schema auto infers from the training records of `table`.
absl::StatusOr<Schema> InferredSchemaOf(const JobConfig& config, const CsvTable& table,
                                        const TextOptions& training) {
  // An MLP bends numbers by itself; a one-hot code would lose their order (docs/features.md).
  absl::StatusOr<InferredSchema> inferred =
      InferCsvSchema(table, config.label, training, config.model != "mlp");
  if (!inferred.ok()) return inferred.status();
  for (const std::string& why : inferred->reasons) spdlog::info("schema: {}", why);
  return inferred->schema;
}

}  // namespace

absl::StatusOr<TabularData> PrepareTabular(const JobConfig& config, const Dataset& data) {
  // A schema file is read before the data, so that its mistakes are named at once.
  std::optional<absl::StatusOr<Schema>> given;
  if (config.schema != kInferredSchema) {
    given = SchemaFile(config.schema);
    if (!given->ok()) return given->status();
  }
  absl::StatusOr<CsvLayout> layout = TableLayout(data.spec());
  if (!layout.ok()) return InvalidArgument("--data: ", layout.status().message());
  absl::StatusOr<CsvLayout> test_layout = TableLayout(data.test_spec());
  if (!test_layout.ok()) return InvalidArgument("--test_data: ", test_layout.status().message());
  absl::StatusOr<CsvTable> table = OpenCsvTable(data.spec().path, *layout);
  if (!table.ok()) return table.status();
  // A LibSVM test file has the training file's columns: an index training never saw has no
  // weight to meet.
  absl::StatusOr<CsvTable> test_table = OpenCsvTable(
      data.test_spec().path, layout->libsvm && test_layout->libsvm ? table->layout : *test_layout);
  if (!test_table.ok()) return test_table.status();
  TextOptions training;
  training.bad_lines =
      config.skip_bad_lines ? TextOptions::BadLines::kSkip : TextOptions::BadLines::kStop;
  training.end_record = data.train_records();
  absl::StatusOr<Schema> schema =
      given.has_value() ? *std::move(given) : InferredSchemaOf(config, *table, training);
  if (!schema.ok()) return schema.status();
  if (!config.objective.empty()) {
    schema->task = config.objective == "regression" ? Schema::Task::kRegression
                                                    : Schema::Task::kClassification;
  }
  if (config.model == "mlp") {
    // An MLP reads dense inputs: its categorical and bucketized columns go in one-hot, as
    // TensorFlow's DNNClassifier reads them through indicator columns.
    for (ColumnSpec& c : schema->columns) c.indicator = c.kind != ColumnSpec::Kind::kNumeric;
  }
  absl::StatusOr<FeatureStats> stats = ComputeCsvStats(*schema, *table, training);
  if (!stats.ok()) return stats.status();
  TabularData t;
  t.schema_json = schema->ToJson();
  t.stats_json = stats->ToJson();
  absl::StatusOr<Transform> transform = CsvTransform(*schema, *stats, *test_table);
  if (!transform.ok()) return transform.status();
  t.shape = transform->shape();
  t.regression = schema->task == Schema::Task::kRegression;
  t.label_mean = stats->label_mean;
  t.label_stddev = stats->label_stddev;
  t.layout = table->layout;
  TextOptions held_out = training;
  held_out.first_record = data.test_begin();
  held_out.end_record = data.test_end();
  absl::StatusOr<Examples> test = ReadCsvThrough(*transform, *test_table, held_out);
  if (!test.ok()) return test.status();
  t.test = *std::move(test);
  spdlog::info("schema: {} dense inputs, {} categorical fields, {} classes over {} rows",
               t.shape.dense_features, t.shape.categorical_fields, t.shape.num_classes,
               stats->rows);
  return t;
}

}  // namespace pstrain
