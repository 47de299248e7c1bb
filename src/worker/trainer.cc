#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/session.h"
#include "common/half.h"
#include "common/rpc.h"
#include "common/status.h"
#include "data/data.h"
#include "features/features.h"
#include "worker/stepper.h"
#include "worker/task_loop.h"

namespace pstrain {

absl::StatusOr<std::vector<VariableRef>> VariablesOf(const TrainingSpec& spec, const Model& model,
                                                     int num_ps) {
  if (spec.placement_size() != static_cast<int>(model.params().size())) {
    return InvalidArgument("placement has ", spec.placement_size(), " variables, the model has ",
                           model.params().size());
  }
  std::vector<VariableRef> vars;
  for (int i = 0; i < spec.placement_size(); ++i) {
    absl::StatusOr<VariableRef> v =
        ToVariableRef(spec.placement(i), model.params()[i].name, model.params()[i].shape, num_ps);
    if (!v.ok()) return v.status();
    vars.push_back(*std::move(v));
  }
  return vars;
}

absl::StatusOr<std::vector<TableRef>> TablesOf(const TrainingSpec& spec, const Model& model) {
  if (spec.tables_size() != static_cast<int>(model.tables().size())) {
    return InvalidArgument("the spec names ", spec.tables_size(), " tables, the model has ",
                           model.tables().size());
  }
  std::vector<TableRef> tables;
  for (int t = 0; t < spec.tables_size(); ++t) {
    const TableSpec& want = model.tables()[t];
    if (spec.tables(t).name() != want.name || spec.tables(t).dim() != want.dim) {
      return InvalidArgument("table ", t, " of the spec is '", spec.tables(t).name(), "' of dim ",
                             spec.tables(t).dim(), "; the model's is '", want.name, "' of dim ",
                             want.dim);
    }
    tables.push_back({want.name, want.dim});
  }
  return tables;
}

namespace {

// Records [begin, end) of the training records that shard `spec.shard_index()` trains on.
std::pair<int64_t, int64_t> ShardRange(const TrainingSpec& spec) {
  const int64_t n = spec.train_records();
  return {n * spec.shard_index() / spec.num_shards(),
          n * (spec.shard_index() + 1) / spec.num_shards()};
}

}  // namespace

ModelConfig ModelConfigOf(const ModelSpec& spec) {
  ModelConfig c;
  c.kind = spec.kind();
  c.dense_features = spec.dense_features();
  c.num_classes = spec.num_classes();
  c.hidden.assign(spec.hidden().begin(), spec.hidden().end());
  c.categorical_fields = spec.categorical_fields();
  c.embedding_dim = spec.embedding_dim();
  c.shared_embedding = spec.shared_embedding();
  c.regression = spec.regression();
  c.label_mean = spec.label_mean();
  c.label_stddev = spec.label_stddev();
  return c;
}

absl::Status ValidateSpec(const TrainingSpec& spec, int num_ps) {
  if (absl::StatusOr<DataSpec> data = DataSpec::Parse(spec.data()); !data.ok()) {
    return data.status();
  }
  if (spec.train_records() < 1) return InvalidArgument("the spec has no training records");
  if (spec.num_shards() < 1 || spec.shard_index() < 0 || spec.shard_index() >= spec.num_shards()) {
    return InvalidArgument("shard ", spec.shard_index(), " of ", spec.num_shards(),
                           " does not exist");
  }
  if (spec.batch_size() < 1) return InvalidArgument("batch size must be at least 1");
  if (spec.epochs() < 1) return InvalidArgument("epochs must be at least 1");
  if (spec.report_every() < 1) return InvalidArgument("report_every must be at least 1");
  if (spec.rpc_timeout_s() <= 0) return InvalidArgument("rpc timeout must be positive");
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(ModelConfigOf(spec.model()));
  if (!model.ok()) return model.status();
  if (absl::StatusOr<std::vector<VariableRef>> vars = VariablesOf(spec, **model, num_ps);
      !vars.ok()) {
    return vars.status();
  }
  if (absl::StatusOr<std::vector<TableRef>> tables = TablesOf(spec, **model); !tables.ok()) {
    return tables.status();
  }
  if (spec.mode() != "async" && spec.mode() != "sync" && spec.mode() != "ssp") {
    return InvalidArgument("unknown mode \"", spec.mode(), "\" (known: async, sync, ssp)");
  }
  if (spec.push_dtype() != DT_INVALID && DtypeName(spec.push_dtype()).empty()) {
    return InvalidArgument("unknown push dtype ", static_cast<int>(spec.push_dtype()),
                           " (known: float32, float16, bfloat16)");
  }
  if (spec.task_queue()) {
    if (spec.num_shards() != 1) {
      return InvalidArgument(
          "a worker of the task queue reads every training record (1 shard, not ",
          spec.num_shards(), ")");
    }
    if (!(spec.heartbeat_interval_s() > 0)) {
      return InvalidArgument("the task queue needs a positive heartbeat interval");
    }
  }
  if (spec.mode() == "sync" && !spec.task_queue() && spec.total_steps() < 1) {
    return InvalidArgument("sync mode needs the job's total_steps");
  }
  return absl::OkStatus();
}

absl::StatusOr<Examples> ReadShard(const TrainingSpec& spec) {
  absl::StatusOr<DataSpec> data = DataSpec::Parse(spec.data());
  if (!data.ok()) return data.status();
  const auto [begin, end] = ShardRange(spec);
  const TextOptions::BadLines bad_lines =
      spec.skip_bad_lines() ? TextOptions::BadLines::kSkip : TextOptions::BadLines::kStop;
  if (spec.schema().empty()) return ReadTrainingRecords(*data, begin, end, bad_lines);
  // A table (CSV, Criteo, LibSVM) through the chief's schema and statistics (features/features.h).
  absl::StatusOr<Schema> schema = Schema::FromJson(spec.schema(), "the job's schema");
  if (!schema.ok()) return schema.status();
  absl::StatusOr<FeatureStats> stats =
      FeatureStats::FromJson(spec.feature_stats(), "the job's feature statistics");
  if (!stats.ok()) return stats.status();
  absl::StatusOr<CsvLayout> layout = TableLayout(*data);
  if (!layout.ok()) return layout.status();
  if (layout->libsvm && spec.has_libsvm_features()) {
    const int64_t features = spec.libsvm_features();
    if (features < 0 || features > kMaxLibSvmColumns || spec.libsvm_first_index() > 1) {
      return InvalidArgument("the job's LibSVM table has ", features,
                             " feature columns from index ", spec.libsvm_first_index(),
                             ": not 0 to ", kMaxLibSvmColumns, " from 0 or 1");
    }
    *layout = LibSvmLayout(spec.libsvm_first_index(), features);
  }
  absl::StatusOr<CsvTable> table = OpenCsvTable(data->path, *layout);
  if (!table.ok()) return table.status();
  absl::StatusOr<Transform> transform = CsvTransform(*std::move(schema), *std::move(stats), *table);
  if (!transform.ok()) return transform.status();
  TextOptions range;
  range.first_record = begin;
  range.end_record = end;
  range.bad_lines = bad_lines;
  return ReadCsvThrough(*transform, *table, range);
}

absl::Status CheckShard(const TrainingSpec& spec, const Examples& data) {
  const auto [begin, end] = ShardRange(spec);
  const std::string where = absl::StrCat(spec.data(), " records [", begin, ", ", end, ")");
  if (data.size() == 0) return InvalidArgument(where, ": no examples to train on");
  const ModelSpec& m = spec.model();
  if (data.dense_dim != m.dense_features()) {
    return InvalidArgument("model ", m.kind(), " has ", m.dense_features(), " dense inputs; ",
                           where, " has ", data.dense_dim, " dense features");
  }
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(ModelConfigOf(m));
  if (!model.ok()) return model.status();
  if ((*model)->task() == ModelTask::kClassification) {
    for (int64_t r = 0; r < data.size(); ++r) {
      const float l = data.labels[r];
      if (!(l >= 0 && l < m.num_classes() && l == std::floor(l))) {
        return InvalidArgument(where, ": label ", l, " of example ", r, " is not a class in [0, ",
                               m.num_classes(), ")");
      }
    }
  }
  return absl::OkStatus();
}

void Train(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options) {
  Stepper stepper(spec, data, options);
  if (spec.task_queue()) return TrainOnTasks(spec, data, options, &stepper);
  // Async and ssp: `epochs` passes over the shard. Sync: passes until the global step reaches
  // total_steps, since dropped (stale) gradients do not count towards it.
  const bool sync = spec.mode() == "sync";
  std::vector<int64_t> order(data.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(spec.seed());
  for (int pass = 0; sync || pass < spec.epochs(); ++pass) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t at = 0; at < order.size(); at += spec.batch_size()) {
      const Stepper::Outcome o = stepper.Step(order, at, pass, /*tag=*/nullptr);
      if (o == Stepper::Outcome::kStop) return;
      if (o == Stepper::Outcome::kReachedTotal) return stepper.Finish();
    }
  }
  stepper.Finish();
}

}  // namespace pstrain
