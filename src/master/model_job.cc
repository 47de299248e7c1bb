#include "master/model_job.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/session.h"
#include "common/initializer_def.h"
#include "common/limits.h"
#include "common/moments.h"
#include "common/rpc.h"
#include "common/status.h"
#include "master/checkpoints.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// Held-out examples evaluated per lookup and forward pass.
constexpr int64_t kEvalChunk = 4096;

// 1 + the largest label of `e`, checking that every label is a class index.
absl::StatusOr<int> ClassesOf(const Examples& e, const std::string& what) {
  int classes = 0;
  for (int64_t r = 0; r < e.size(); ++r) {
    const float l = e.labels[r];
    if (!(l >= 0 && l < (1 << 20) && l == std::floor(l))) {
      return InvalidArgument(
          what, ": label ", l, " of example ", r,
          " is not a class index (a non-negative integer), as a classifier needs");
    }
    classes = std::max(classes, static_cast<int>(l) + 1);
  }
  return classes;
}

// What the built-in models cannot do with a schema's inputs: a linear (binary) model over more
// than two classes, an MLP over crossed columns (it reads dense inputs only; its other columns
// go in one-hot).
absl::Status CheckModelFitsSchema(const ModelConfig& mc) {
  if (mc.kind == "linear" && !mc.regression && mc.num_classes != 2) {
    return InvalidArgument("model linear is a binary classifier; the label has ", mc.num_classes,
                           " classes (--model mlp classifies any number)");
  }
  if (mc.kind == "mlp" && mc.categorical_fields > 0) {
    return InvalidArgument(
        "model mlp reads dense inputs (categorical and bucketized columns "
        "one-hot); the schema has ",
        mc.categorical_fields, " crossed columns (--model wide_deep or linear reads them)");
  }
  return absl::OkStatus();
}

// A regression over `train`: its labels' mean and standard deviation.
void LabelMoments(const Examples& train, ModelConfig* mc) {
  Moments m;
  for (float l : train.labels) m.Add(l);
  mc->regression = true;
  mc->label_mean = static_cast<double>(m.mean);
  mc->label_stddev = m.stddev();
}

}  // namespace

TableDef TableDefOf(const TableSpec& table, const JobConfig& config, int num_ps) {
  TableDef def;
  def.set_name(table.name);
  def.set_dim(table.dim);
  *def.mutable_initializer() = InitializerDefOf(table.initializer);
  if (table.optimizer.has_value() && !config.table_optimizer_given) {
    OptimizerConfig* o = def.mutable_optimizer();
    o->set_name(table.optimizer->name);
    o->set_learning_rate(table.optimizer->learning_rate);
    o->set_initial_accumulator_value(table.optimizer->initial_accumulator_value);
    o->set_l1(table.optimizer->l1);
    o->set_l2(table.optimizer->l2);
  } else {
    *def.mutable_optimizer() = config.table_optimizer;
  }
  def.set_admit_after(config.admit_after);
  def.set_unadmitted_zeros(config.unadmitted_zeros);
  def.set_evict_after_steps(config.evict_after_steps);
  def.set_max_rows(CeilDiv(config.table_max_rows, num_ps));
  def.set_max_bytes(CeilDiv(config.table_max_bytes, num_ps));
  return def;
}

ModelJob::ModelJob(const JobConfig& config, int num_ps, Dataset data, TabularData tabular,
                   ModelConfig model_config, std::unique_ptr<Model> model)
    : config_(config),
      data_(std::move(data)),
      test_(std::move(tabular.test)),
      schema_json_(std::move(tabular.schema_json)),
      stats_json_(std::move(tabular.stats_json)),
      layout_(std::move(tabular.layout)),
      model_config_(std::move(model_config)),
      model_(std::move(model)),
      num_ps_(num_ps) {}

absl::StatusOr<std::unique_ptr<ModelJob>> ModelJob::Prepare(const JobConfig& config, int num_ps) {
  // JobConfig::Validate checked that both specs parse.
  const DataSpec train = *DataSpec::Parse(config.data);
  Dataset::Options options;
  options.bad_lines =
      config.skip_bad_lines ? TextOptions::BadLines::kSkip : TextOptions::BadLines::kStop;
  if (!config.test_data.empty()) options.test = *DataSpec::Parse(config.test_data);
  options.holdout = config.holdout;
  absl::StatusOr<Dataset> data = Dataset::Open(train, options);
  if (!data.ok()) return data.status();
  ModelConfig mc;
  mc.kind = config.model;
  mc.hidden = config.hidden;
  mc.embedding_dim = config.embedding_dim;
  mc.shared_embedding = config.shared_embedding;
  TabularData tabular;
  if (!config.schema.empty()) {
    absl::StatusOr<TabularData> t = PrepareTabular(config, *data);
    if (!t.ok()) return t.status();
    tabular = *std::move(t);
    mc.dense_features = tabular.shape.dense_features;
    mc.categorical_fields = tabular.shape.categorical_fields;
    mc.num_classes = tabular.shape.num_classes;
    mc.regression = tabular.regression;
    mc.label_mean = tabular.label_mean;
    mc.label_stddev = tabular.label_stddev;
    if (absl::Status s = CheckModelFitsSchema(mc); !s.ok()) return s;
  } else {
    absl::StatusOr<Examples> test = data->ReadTest();
    if (!test.ok()) return test.status();
    tabular.test = *std::move(test);
    mc.dense_features = data->shape().dense_features;
    mc.categorical_fields = data->shape().categorical_fields;
    mc.num_classes = data->shape().num_classes;
    if (config.objective == "regression") {
      absl::StatusOr<Examples> all = data->ReadTrain(0, data->train_records());
      if (!all.ok()) return all.status();
      LabelMoments(*all, &mc);
    }
  }
  const Examples& test = tabular.test;
  if (test.size() == 0) {
    return InvalidArgument(config.test_data.empty() ? config.data : config.test_data,
                           ": no held-out example could be read");
  }
  if (mc.num_classes == 0) {
    // A text file does not say how many classes it has: its labels do. Whether the model
    // classifies is asked of it built for two (a classifier refuses to be built for none).
    ModelConfig two = mc;
    two.num_classes = 2;
    absl::StatusOr<std::unique_ptr<Model>> probe = Model::Create(two);
    if (probe.ok() && (*probe)->task() == ModelTask::kClassification) {
      absl::StatusOr<Examples> all = data->ReadTrain(0, data->train_records());
      if (!all.ok()) return all.status();
      absl::StatusOr<int> train_classes = ClassesOf(*all, config.data);
      if (!train_classes.ok()) return train_classes.status();
      absl::StatusOr<int> test_classes = ClassesOf(test, "the held-out examples");
      if (!test_classes.ok()) return test_classes.status();
      mc.num_classes = std::max({2, *train_classes, *test_classes});
    }
  }
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(mc);
  if (!model.ok()) return InvalidArgument("--data ", config.data, ": ", model.status().message());
  spdlog::info("model {} on {}: {} training records, {} held-out examples", mc.kind,
               data->spec().ToString(), data->train_records(), test.size());
  return std::unique_ptr<ModelJob>(
      new ModelJob(config, num_ps, *std::move(data), std::move(tabular), mc, *std::move(model)));
}

ModelSignature ModelJob::Signature() const {
  ModelSignature sig = SignatureOf(*model_);
  if (!schema_json_.empty()) {
    sig.features = {{"schema", nlohmann::json::parse(schema_json_)},
                    {"stats", nlohmann::json::parse(stats_json_)}};
  }
  return sig;
}

absl::Status ModelJob::CreateParameters(const OptimizerConfig& optimizer, VariablePlacer* placer,
                                        TableCreator* tables, const RestoreFn& restore) {
  std::vector<Tensor> init = model_->Initialize(config_.seed);
  std::vector<NewVariable> vars;
  for (size_t i = 0; i < init.size(); ++i) {
    std::vector<int64_t> shape = init[i].shape;
    vars.push_back({model_->params()[i].name, std::move(shape), optimizer,
                    [t = std::move(init[i])]() -> absl::StatusOr<Tensor> { return t; }});
  }
  if (restore) {
    std::vector<TableDef> defs;
    for (const TableSpec& t : model_->tables()) defs.push_back(TableDefOf(t, config_, num_ps_));
    return restore(vars, defs, &placement_);
  }
  absl::StatusOr<std::vector<Placement>> placement = placer->CreateAll(vars);
  if (!placement.ok()) return placement.status();
  placement_ = *std::move(placement);
  for (const TableSpec& t : model_->tables()) {
    if (absl::Status s = tables->GetOrCreate(TableDefOf(t, config_, num_ps_)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void ModelJob::FillSpec(TrainingSpec* spec) const {
  spec->set_data(data_.spec().ToString());
  spec->set_train_records(data_.train_records());
  spec->set_skip_bad_lines(config_.skip_bad_lines);
  spec->set_schema(schema_json_);
  spec->set_feature_stats(stats_json_);
  if (layout_.libsvm && !layout_.names.empty()) {
    spec->set_libsvm_features(static_cast<int64_t>(layout_.names.size()) - 1);
    spec->set_libsvm_first_index(layout_.first_index);
  }
  ModelSpec* m = spec->mutable_model();
  m->set_kind(model_config_.kind);
  m->set_dense_features(model_config_.dense_features);
  m->set_num_classes(model_config_.num_classes);
  for (int h : model_config_.hidden) m->add_hidden(h);
  m->set_categorical_fields(model_config_.categorical_fields);
  m->set_embedding_dim(model_config_.embedding_dim);
  m->set_shared_embedding(model_config_.shared_embedding);
  m->set_regression(model_config_.regression);
  m->set_label_mean(model_config_.label_mean);
  m->set_label_stddev(model_config_.label_stddev);
  for (const Placement& p : placement_) *spec->add_placement() = p;
  for (const TableSpec& t : model_->tables()) {
    TableInfo* info = spec->add_tables();
    info->set_name(t.name);
    info->set_dim(t.dim);
  }
}

absl::StatusOr<Metrics> ModelJob::Evaluate(const std::vector<std::string>& ps_addresses) {
  const int num_ps = static_cast<int>(ps_addresses.size());
  std::vector<VariableRef> vars;
  for (size_t i = 0; i < placement_.size(); ++i) {
    absl::StatusOr<VariableRef> v =
        ToVariableRef(placement_[i], model_->params()[i].name, model_->params()[i].shape, num_ps);
    if (!v.ok()) return v.status();
    vars.push_back(*std::move(v));
  }
  std::vector<TableRef> refs;
  for (const TableSpec& t : model_->tables()) refs.push_back({t.name, t.dim});
  SessionOptions o;
  o.ps_addresses = ps_addresses;
  o.sender = MakeSender("chief", 0);
  o.timeout = config_.rpc_timeout;
  ParameterSession session(std::move(o), std::move(vars), std::move(refs));
  ModelInputs in;
  if (absl::Status s = session.Pull({}, &in.params); !s.ok()) return s;
  std::vector<float> predictions, chunk_predictions, class_one, chunk_class_one;
  predictions.reserve(test_.size());
  bool two_classes = true;
  Examples chunk;
  chunk.dense_dim = test_.dense_dim;
  for (int64_t begin = 0; begin < test_.size(); begin += kEvalChunk) {
    chunk.Clear();
    for (int64_t r = begin; r < std::min(test_.size(), begin + kEvalChunk); ++r) {
      chunk.AppendRow(test_, r);
    }
    const std::vector<std::vector<uint64_t>>& keys = model_->TouchedKeys(chunk);
    if (!session.tables().empty()) {
      if (absl::Status s = session.Lookup(keys, {}, &in.rows); !s.ok()) return s;
    }
    model_->Predict(in, chunk, &chunk_predictions);
    predictions.insert(predictions.end(), chunk_predictions.begin(), chunk_predictions.end());
    two_classes = two_classes && model_->ClassOneProbabilities(in, chunk, &chunk_class_one);
    if (two_classes) {
      class_one.insert(class_one.end(), chunk_class_one.begin(), chunk_class_one.end());
    }
  }
  return ::pstrain::Evaluate(model_->task(), predictions, test_.labels,
                             two_classes ? &class_one : nullptr);
}

}  // namespace pstrain
