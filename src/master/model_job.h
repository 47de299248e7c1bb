// Internal to src/master: the chief's part of a job that trains a built-in model (model/model.h):
// the data, the model built from the flags and the data's shape, its dense variables and
// embedding tables on the PS, what every worker's spec says of them, and the evaluation on the
// held-out examples.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint_manifest.h"
#include "data/data.h"
#include "features/features.h"
#include "master/master.h"
#include "master/tables.h"
#include "master/variables.h"
#include "model/model.h"
#include "worker.pb.h"

namespace pstrain {

// The table definition the chief creates for `table` of the model on each of `num_ps` tasks:
// the flags' optimizer, admission and eviction, and the whole-table caps divided over the tasks
// (rounded up, so a cap stays a cap).
TableDef TableDefOf(const TableSpec& table, const JobConfig& config, int num_ps);

// A CSV table read through a schema (JobConfig::schema): the schema and the statistics of the
// training records as every worker's spec carries them (JSON, docs/features.md), the shape of
// the model's inputs, and the held-out examples through them. Errors name the file, line and
// column.
struct TabularData {
  std::string schema_json, stats_json;
  FeatureShape shape;
  bool regression = false;
  double label_mean = 0, label_stddev = 0;  // regression: of the training rows' label
  CsvLayout layout;                         // the training file's (a LibSVM file's columns)
  Examples test;
};
absl::StatusOr<TabularData> PrepareTabular(const JobConfig& config, const Dataset& data);

// Not thread-safe: the chief's job thread uses it.
class ModelJob {
 public:
  // The model's variables and tables, and its schema and statistics when it has them: what its
  // checkpoints say of it.
  ModelSignature Signature() const;
  // Opens config.data (counting its records) and reads the held-out examples, then builds the
  // model of config.model from the flags and the data's shape (a classifier over a text file
  // reads the training labels for its number of classes). `num_ps` divides the table caps.
  // Errors name the data or the flag.
  static absl::StatusOr<std::unique_ptr<ModelJob>> Prepare(const JobConfig& config, int num_ps);

  int64_t train_records() const { return data_.train_records(); }
  bool regression() const { return model_config_.regression; }
  const Model& model() const { return *model_; }

  // Creates the dense variables through `placer` with `optimizer` (the job's, its schedule's
  // length filled in; values drawn from config.seed) and the tables on every PS through
  // `tables`.
  // With `restore` (master/checkpoints.h), that creates them instead, from a checkpoint.
  using RestoreFn = std::function<absl::Status(
      const std::vector<NewVariable>&, const std::vector<TableDef>&, std::vector<Placement>*)>;
  absl::Status CreateParameters(const OptimizerConfig& optimizer, VariablePlacer* placer,
                                TableCreator* tables, const RestoreFn& restore = nullptr);

  // Sets what every worker's spec says of the data, the model, its placement and its tables.
  void FillSpec(TrainingSpec* spec) const;

  // The model's metrics on the held-out examples, with the parameters as the PS hold them now.
  absl::StatusOr<Metrics> Evaluate(const std::vector<std::string>& ps_addresses);
  int64_t test_bad_lines_skipped() const { return test_.bad_lines_skipped; }

 private:
  ModelJob(const JobConfig& config, int num_ps, Dataset data, TabularData tabular,
           ModelConfig model_config, std::unique_ptr<Model> model);

  const JobConfig config_;
  const Dataset data_;
  const Examples test_;
  const std::string schema_json_, stats_json_;  // with a schema
  const CsvLayout layout_;                      // with a schema: the training file's
  const ModelConfig model_config_;
  const std::unique_ptr<Model> model_;
  const int num_ps_;
  std::vector<Placement> placement_;  // set by CreateParameters
};

}  // namespace pstrain
