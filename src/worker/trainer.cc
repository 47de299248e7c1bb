#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "client/table_client.h"
#include "common/rpc.h"
#include "data/data.h"
#include "worker/parameters.h"

namespace pstrain {

namespace {

absl::Status Bad(const auto&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// The model's variables with their shards, as the chief placed them, in the model's order.
absl::StatusOr<std::vector<VariableRef>> VariablesOf(const TrainingSpec& spec, const Model& model,
                                                     int num_ps) {
  if (spec.placement_size() != static_cast<int>(model.params().size())) {
    return Bad("placement has ", spec.placement_size(), " variables, the model has ",
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

// The model's tables as the spec names them, in the model's order.
absl::StatusOr<std::vector<TableRef>> TablesOf(const TrainingSpec& spec, const Model& model) {
  if (spec.tables_size() != static_cast<int>(model.tables().size())) {
    return Bad("the spec names ", spec.tables_size(), " tables, the model has ",
               model.tables().size());
  }
  std::vector<TableRef> tables;
  for (int t = 0; t < spec.tables_size(); ++t) {
    const TableSpec& want = model.tables()[t];
    if (spec.tables(t).name() != want.name || spec.tables(t).dim() != want.dim) {
      return Bad("table ", t, " of the spec is '", spec.tables(t).name(), "' of dim ",
                 spec.tables(t).dim(), "; the model's is '", want.name, "' of dim ", want.dim);
    }
    tables.push_back({want.name, want.dim});
  }
  return tables;
}

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
  return c;
}

absl::Status ValidateSpec(const TrainingSpec& spec, int num_ps) {
  if (absl::StatusOr<DataSpec> data = DataSpec::Parse(spec.data()); !data.ok()) {
    return data.status();
  }
  if (spec.train_records() < 1) return Bad("the spec has no training records");
  if (spec.num_shards() < 1 || spec.shard_index() < 0 || spec.shard_index() >= spec.num_shards()) {
    return Bad("shard ", spec.shard_index(), " of ", spec.num_shards(), " does not exist");
  }
  if (spec.batch_size() < 1) return Bad("batch size must be at least 1");
  if (spec.epochs() < 1) return Bad("epochs must be at least 1");
  if (spec.report_every() < 1) return Bad("report_every must be at least 1");
  if (spec.rpc_timeout_s() <= 0) return Bad("rpc timeout must be positive");
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
    return Bad("unknown mode \"", spec.mode(), "\" (known: async, sync, ssp)");
  }
  if (spec.task_queue()) {
    if (spec.num_shards() != 1) {
      return Bad("a worker of the task queue reads every training record (1 shard, not ",
                 spec.num_shards(), ")");
    }
    if (!(spec.heartbeat_interval_s() > 0)) {
      return Bad("the task queue needs a positive heartbeat interval");
    }
    if (spec.mode() != "async") {
      return Bad("the task queue runs in async mode only so far, not ", spec.mode());
    }
  }
  if (spec.mode() == "sync" && spec.total_steps() < 1) {
    return Bad("sync mode needs the job's total_steps");
  }
  return absl::OkStatus();
}

absl::StatusOr<Examples> ReadShard(const TrainingSpec& spec) {
  absl::StatusOr<DataSpec> data = DataSpec::Parse(spec.data());
  if (!data.ok()) return data.status();
  const auto [begin, end] = ShardRange(spec);
  return ReadTrainingRecords(
      *data, begin, end,
      spec.skip_bad_lines() ? TextOptions::BadLines::kSkip : TextOptions::BadLines::kStop);
}

absl::Status CheckShard(const TrainingSpec& spec, const Examples& data) {
  const auto [begin, end] = ShardRange(spec);
  const std::string where = absl::StrCat(spec.data(), " records [", begin, ", ", end, ")");
  if (data.size() == 0) return Bad(where, ": no examples to train on");
  const ModelSpec& m = spec.model();
  if (data.dense_dim != m.dense_features()) {
    return Bad("model ", m.kind(), " has ", m.dense_features(), " dense inputs; ", where, " has ",
               data.dense_dim, " dense features");
  }
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(ModelConfigOf(m));
  if (!model.ok()) return model.status();
  if ((*model)->task() == ModelTask::kClassification) {
    for (int64_t r = 0; r < data.size(); ++r) {
      const float l = data.labels[r];
      if (!(l >= 0 && l < m.num_classes() && l == std::floor(l))) {
        return Bad(where, ": label ", l, " of example ", r, " is not a class in [0, ",
                   m.num_classes(), ")");
      }
    }
  }
  return absl::OkStatus();
}

void Train(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options) {
  // ValidateSpec accepted the model, its placement and its tables.
  std::unique_ptr<Model> model = *Model::Create(ModelConfigOf(spec.model()));
  const int num_ps = static_cast<int>(options.ps_addresses.size());
  ModelParameters params(options.ps_addresses, *VariablesOf(spec, *model, num_ps),
                         *TablesOf(spec, *model), MakeSender("worker", options.task),
                         absl::Seconds(spec.rpc_timeout_s()), options.cancel);
  const bool sync = spec.mode() == "sync";
  const bool ssp = spec.mode() == "ssp";

  const int64_t n = data.size();
  const int64_t steps_per_epoch = (n + spec.batch_size() - 1) / spec.batch_size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(spec.seed());

  ProgressRequest report;
  *report.mutable_sender() = MakeSender("worker", options.task);
  double loss_sum = 0;
  int loss_count = 0;
  auto send = [&]() {
    report.set_loss(loss_count > 0 ? loss_sum / loss_count : report.loss());
    loss_sum = 0;
    loss_count = 0;
    return options.report(report);
  };
  auto fail = [&](const std::string& error) {
    if (options.stop->load()) return;  // stopped from outside: the chief knows
    report.set_error(error);
    send();
  };

  Examples batch;
  batch.dense_dim = data.dense_dim;
  ModelInputs inputs;
  ModelGrads grads;
  uint64_t next_step = 0;  // sync: the global step this worker waits for
  // One step on the rows order[at, at + batch_size) of `data`, in epoch `epoch` (async, ssp).
  enum class Outcome { kNext, kReachedTotal, kStop };
  auto step_on = [&](const std::vector<int64_t>& order, size_t at, int epoch) -> Outcome {
    if (options.stop->load()) return Outcome::kStop;
    const int64_t rows = std::min<int64_t>(spec.batch_size(), order.size() - at);
    batch.Clear();
    for (int64_t r = 0; r < rows; ++r) batch.AppendRow(data, order[at + r]);
    const std::vector<std::vector<uint64_t>>& keys = model->TouchedKeys(batch);
    absl::Status s =
        params.Read(keys, sync ? next_step : 0, ssp ? report.steps() : 0, sync, &inputs);
    if (!s.ok()) {
      fail(std::string(s.message()));
      return Outcome::kStop;
    }
    const uint64_t step = params.step();
    if (sync && static_cast<int64_t>(step) >= spec.total_steps()) return Outcome::kReachedTotal;
    report.set_epoch(sync ? static_cast<int>(step / steps_per_epoch) : epoch);
    if (spec.step_delay_ms() > 0) {  // a straggler: slow between reading and pushing
      std::this_thread::sleep_for(std::chrono::milliseconds(spec.step_delay_ms()));
    }
    loss_sum += model->ForwardBackward(inputs, batch, &grads);
    ++loss_count;
    if (std::string bad = NonFinite(grads, model->params(), model->tables(), keys); !bad.empty()) {
      if (spec.stop_on_nonfinite()) {
        fail(absl::StrCat("step ", report.steps(), ": ", bad));
        return Outcome::kStop;
      }
      report.set_nonfinite_skipped(report.nonfinite_skipped() + 1);
    } else {
      int dropped = 0;
      s = params.Write(keys, grads, sync, &dropped);
      if (!s.ok()) {
        fail(std::string(s.message()));
        return Outcome::kStop;
      }
      if (dropped > 0) report.set_stale_dropped(report.stale_dropped() + 1);
    }
    next_step = step + 1;
    report.set_steps(report.steps() + 1);
    report.set_examples(report.examples() + rows);
    if (report.steps() % spec.report_every() == 0 && !send()) return Outcome::kStop;
    return Outcome::kNext;
  };
  if (spec.task_queue()) {
    // Tasks from the chief's queue until none is left: each one's rows, shuffled, in batches.
    for (;;) {
      absl::StatusOr<std::optional<TaskAssignment>> task = options.next_task();
      if (!task.ok()) return fail(std::string(task.status().message()));
      if (!task->has_value()) break;
      const TaskAssignment& t = **task;
      if (t.begin() < 0 || t.end() <= t.begin() || t.end() > n) {
        return fail(absl::StrCat("the chief handed out rows [", t.begin(), ", ", t.end(),
                                 ") of task ", t.task(), "; the data has ", n));
      }
      order.resize(t.end() - t.begin());
      std::iota(order.begin(), order.end(), t.begin());
      std::shuffle(order.begin(), order.end(), rng);
      const int64_t steps_before = report.steps();
      for (size_t at = 0; at < order.size(); at += spec.batch_size()) {
        if (step_on(order, at, t.epoch()) != Outcome::kNext) return;
      }
      TaskDoneRequest done;
      *done.mutable_sender() = report.sender();
      done.set_epoch(t.epoch());
      done.set_task(t.task());
      done.set_steps(report.steps() - steps_before);
      done.set_examples(static_cast<int64_t>(order.size()));
      if (absl::Status s = options.task_done(done); !s.ok()) return fail(std::string(s.message()));
    }
  } else {
    // Async and ssp: `epochs` passes over the shard. Sync: passes until the global step reaches
    // total_steps, since dropped (stale) gradients do not count towards it.
    bool reached_total = false;
    for (int pass = 0; !reached_total && (sync || pass < spec.epochs()); ++pass) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t at = 0; at < order.size(); at += spec.batch_size()) {
        const Outcome o = step_on(order, at, pass);
        if (o == Outcome::kStop) return;
        if (o == Outcome::kReachedTotal) {
          reached_total = true;
          break;
        }
      }
    }
  }
  if (absl::Status s = params.Leave(); !s.ok()) return fail(std::string(s.message()));
  report.set_done(true);
  send();
}

}  // namespace pstrain
