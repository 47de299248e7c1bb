// JobConfig validation and the JSON form of JobResult.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/status.h"
#include "data/data.h"
#include "master/master.h"
#include "master/placement.h"
#include "master/specs.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

// x to `digits` decimals (dividing by a power of ten, which JSON then prints short).
double Round(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}

}  // namespace

JobConfig::JobConfig() {
  optimizer.set_name("adam");
  optimizer.set_learning_rate(0.001);
  table_optimizer.set_name("adagrad");
  table_optimizer.set_learning_rate(0.1);
}

bool JobConfig::BuiltInModel() const { return model != "external"; }

int64_t JobConfig::TaskRows(int64_t rows, int num_workers) const {
  const int64_t workers = std::max(num_workers, 1);
  const int64_t share = CeilDiv(rows, 8 * workers);
  if (!BuiltInModel()) {
    // Client programs: no queue without --rows (or with --task_rows 0); auto is an eighth of a
    // worker's share (their batch size is theirs).
    if (rows <= 0 || task_rows == 0) return 0;
    return task_rows > 0 ? task_rows : std::max<int64_t>(1, share);
  }
  if (task_rows >= 0) return task_rows;
  const int64_t b = batch_size;
  const int64_t t = std::min(200 * b, share);
  return std::max(b, CeilDiv(t, b) * b);
}

int JobConfig::EpochsFor(int64_t rows) const {
  if (epochs != kAutoEpochs) return epochs;
  // A deep part fits a few hundred rows by heart long before a linear model settles on them.
  const int64_t examples = model == "linear" ? kAutoEpochExamples : kAutoDeepEpochExamples;
  return static_cast<int>(
      std::clamp<int64_t>(CeilDiv(examples, std::max<int64_t>(rows, 1)), 1, kMaxAutoEpochs));
}

absl::Status JobConfig::Validate() const {
  if (model != "mlp" && model != "linear" && model != "wide_deep" && model != "external") {
    return InvalidArgument("--model: unknown model \"", model,
                           "\" (known: mlp, linear, wide_deep, external)");
  }
  for (int h : hidden) {
    if (h <= 0) return InvalidArgument("--hidden: layer width ", h, " must be positive");
  }
  if (absl::Status s = ValidateData(); !s.ok()) return s;
  if (absl::Status s = ValidateTables(); !s.ok()) return s;
  if (mode != "async" && mode != "sync" && mode != "ssp") {
    return InvalidArgument("--mode: unknown mode \"", mode, "\" (known: async, sync, ssp)");
  }
  if (staleness < 0 || staleness > 1000000) {
    return InvalidArgument("--staleness ", staleness, " is out of range [0, 1000000]");
  }
  if (replicas_to_aggregate < 0) {
    return InvalidArgument("--replicas_to_aggregate ", replicas_to_aggregate,
                           " must be non-negative");
  }
  // A built-in model's job sets a cosine schedule's length to its own when --lr_total_steps is
  // not given.
  if (absl::Status s = ValidateOptimizerConfig(optimizer, FlagName, BuiltInModel()); !s.ok()) {
    return s;
  }
  if (absl::StatusOr<PartitionerSpec> p = ParsePartitioner(partitioner); !p.ok()) {
    return InvalidArgument("--partitioner: ", p.status().message());
  }
  if (absl::StatusOr<PlacementStrategy> p = ParsePlacement(placement); !p.ok()) {
    return InvalidArgument("--placement: ", p.status().message());
  }
  if (batch_size < 1) return InvalidArgument("--batch ", batch_size, " must be at least 1");
  if (epochs < 1 && epochs != kAutoEpochs) {
    return InvalidArgument("--epochs ", epochs, " must be at least 1 (or auto)");
  }
  if (epochs == kAutoEpochs && !BuiltInModel()) {
    return InvalidArgument("--epochs auto is for the built-in models; give a number");
  }
  if (report_every < 1)
    return InvalidArgument("report_every ", report_every, " must be at least 1");
  if (checkpoint_every_steps < 0) {
    return InvalidArgument("--checkpoint_every_steps ", checkpoint_every_steps,
                           " must be non-negative");
  }
  if (!(checkpoint_every_secs >= 0) || std::isinf(checkpoint_every_secs)) {
    return InvalidArgument("--checkpoint_every_secs ", checkpoint_every_secs,
                           " must be non-negative");
  }
  if (keep_checkpoints < 1)
    return InvalidArgument("--keep_checkpoints ", keep_checkpoints, " must be >= 1");
  if (checkpoint_dir.empty() && (checkpoint_every_steps > 0 || checkpoint_every_secs > 0)) {
    return InvalidArgument(
        "--checkpoint_every_steps and --checkpoint_every_secs need --checkpoint_dir");
  }
  if (task_rows < -1) {
    return InvalidArgument("--task_rows ", task_rows,
                           " must be -1 (auto), 0 (fixed shards, no recovery) or a number of rows");
  }
  if (rows < 0) return InvalidArgument("--rows ", rows, " must be non-negative");
  if (rows > 0 && BuiltInModel()) {
    return InvalidArgument(
        "--rows is for client programs (--model external); a built-in model's rows are "
        "its --data's");
  }
  if (task_rows > 0 && !BuiltInModel() && rows == 0) {
    return InvalidArgument(
        "--task_rows with --model external needs --rows: the number of rows the ",
        "programs' data has, which the chief cuts into tasks");
  }
  if (task_rows != 0 && (BuiltInModel() || rows > 0)) {
    if (!(heartbeat_secs > 0) || !(heartbeat_timeout_secs > heartbeat_secs) ||
        std::isinf(heartbeat_timeout_secs)) {
      return InvalidArgument("--heartbeat_secs ", heartbeat_secs,
                             " must be positive and less than ", "--heartbeat_timeout_secs ",
                             heartbeat_timeout_secs);
    }
  }
  if (restarted && restore_from.empty()) {
    return InvalidArgument(
        "--restarted is for a chief restarted with --restore_from (or --resume)");
  }
  if (slow_worker_delay_ms < 0) {
    return InvalidArgument("--slow_worker_delay_ms ", slow_worker_delay_ms,
                           " must be non-negative");
  }
  if (eval_delay_ms < 0) {
    return InvalidArgument("--eval_delay_ms ", eval_delay_ms, " must be non-negative");
  }
  if (end_delay_ms < 0) {
    return InvalidArgument("--end_delay_ms ", end_delay_ms, " must be non-negative");
  }
  if (push_bucket_bytes < 0) {
    return InvalidArgument("--push_bucket_bytes ", push_bucket_bytes, " must be non-negative");
  }
  const std::pair<const char*, absl::Duration> timeouts[] = {
      {"--connect_timeout", register_timeout},
      {"--task_timeout", task_timeout},
      {"rpc_timeout", rpc_timeout}};
  for (const auto& [flag, d] : timeouts) {
    if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
      return InvalidArgument(flag, " ", absl::FormatDuration(d), " must be positive and finite");
    }
  }
  return absl::OkStatus();
}

absl::Status JobConfig::ValidateData() const {
  if (!BuiltInModel()) return absl::OkStatus();
  if (absl::StatusOr<DataSpec> d = DataSpec::Parse(data); !d.ok()) {
    return InvalidArgument("--data: ", d.status().message());
  }
  if (!test_data.empty()) {
    if (absl::StatusOr<DataSpec> d = DataSpec::Parse(test_data); !d.ok()) {
      return InvalidArgument("--test_data: ", d.status().message());
    }
  }
  if (!(holdout > 0 && holdout < 1))
    return InvalidArgument("--holdout ", holdout, " must be in (0, 1)");
  if (!schema.empty()) {
    for (const std::string* d : {&data, &test_data}) {
      const DataSpec::Format f = d->empty() ? DataSpec::Format::kCsv : DataSpec::Parse(*d)->format;
      if (f != DataSpec::Format::kCsv && f != DataSpec::Format::kCriteo &&
          f != DataSpec::Format::kLibSvm) {
        return InvalidArgument(
            "--schema reads CSV files (csv:PATH), LibSVM files (libsvm:PATH) and Criteo's TSV "
            "(criteo:PATH), not ",
            *d);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status JobConfig::ValidateTables() const {
  if (embedding_dim < 1 || embedding_dim > kMaxTableDim) {
    return InvalidArgument("--embedding_dim ", embedding_dim, " is out of range [1, ", kMaxTableDim,
                           "]");
  }
  const std::string& name = table_optimizer.name();
  if (name != "sgd" && name != "adagrad" && name != "adam" && name != "ftrl") {
    return InvalidArgument("--table_optimizer: unknown table optimizer \"", name,
                           "\" (known: sgd, adagrad, adam, ftrl)");
  }
  // Only the name and learning rate of the table optimizer have flags of their own.
  auto flag = [](absl::string_view field) {
    if (field == "name") return std::string("--table_optimizer");
    if (field == "learning_rate") return std::string("--table_lr");
    return FlagName(field);
  };
  if (absl::Status s = ValidateOptimizerConfig(table_optimizer, flag); !s.ok()) return s;
  const std::pair<const char*, int64_t> counts[] = {{"--admit_after", admit_after},
                                                    {"--evict_after_steps", evict_after_steps},
                                                    {"--table_max_rows", table_max_rows},
                                                    {"--table_max_bytes", table_max_bytes}};
  for (const auto& [f, v] : counts) {
    if (v < 0) return InvalidArgument(f, " ", v, " must be non-negative");
  }
  return absl::OkStatus();
}

absl::Status JobConfig::ValidateFor(int num_ps, int num_workers) const {
  if (absl::Status s = Validate(); !s.ok()) return s;
  if (num_ps < 1 || num_ps > kMaxTasks) {
    return InvalidArgument("the cluster has ", num_ps, " ps tasks; a job needs 1 to ", kMaxTasks);
  }
  if (num_workers < 1 || num_workers > kMaxTasks) {
    return InvalidArgument("the cluster has ", num_workers, " workers; a job needs 1 to ",
                           kMaxTasks);
  }
  if (replicas_to_aggregate > num_workers) {
    return InvalidArgument("--replicas_to_aggregate ", replicas_to_aggregate, " exceeds the ",
                           num_workers, " workers");
  }
  if (slow_worker >= num_workers) {
    return InvalidArgument("--slow_worker ", slow_worker, " is not a worker (there are ",
                           num_workers, ")");
  }
  return absl::OkStatus();
}

std::string JobResult::ToJson() const {
  if (!finished_before.empty()) return finished_before;
  nlohmann::json j = {{"mode", mode},
                      {"examples_per_sec", std::llround(examples_per_sec)},
                      {"global_step", global_step},
                      {"steps", steps},
                      {"worker_pushes", worker_pushes},
                      {"examples", examples},
                      {"seconds", Round(seconds, 1)},
                      {"ps", num_ps},
                      {"workers", num_workers},
                      {"worker_steps", worker_steps},
                      {"nonfinite_skipped", nonfinite_skipped},
                      {"updates_applied", ps_stats.updates_applied()},
                      {"stale_dropped", ps_stats.stale_dropped()},
                      {"nonfinite_rejected", ps_stats.nonfinite_rejected()},
                      {"max_clock_gap", ps_stats.max_clock_gap()},
                      {"pulls_waited", ps_stats.pulls_waited()},
                      {"worker_stale_steps", worker_stale_steps}};
  if (loss_reported) j["final_loss"] = Round(final_loss, 4);
  if (total_steps > 0) j["total_steps"] = total_steps;
  if (task_queue) {
    j["failures_survived"] = failures_survived();
    j["rollbacks"] = rollbacks;
    j["chief_restarts"] = chief_restarts;
    j["workers_replaced"] = workers_replaced;
    j["restarts_after_end"] = restarts_after_end;
    j["duplicates_dropped"] = ps_stats.duplicates_dropped();
    j["tasks"] = tasks;
    j["tasks_applied"] = tasks_applied;
    j["tasks_redone"] = tasks_redone;
    j["workers_declared_dead"] = workers_declared_dead;
    j["tasks_applied_once"] = ledger_check.empty();
    if (!ledger_check.empty()) j["ledger_problem"] = ledger_check;
  }
  if (!model.empty()) j["model"] = model;
  if (classification || test_accuracy > 0) j["test_accuracy"] = Round(test_accuracy, 4);
  if (classification) j["macro_f1"] = Round(macro_f1, 4);
  if (binary) {
    j["auc"] = Round(auc, 4);
    j["log_loss"] = Round(log_loss, 4);
    j["base_log_loss"] = Round(base_log_loss, 4);
  }
  if (regression) {
    j["rmse"] = Round(rmse, 4);
    j["mae"] = Round(mae, 4);
  }
  if (classification || binary || regression) {
    j["test_examples"] = test_examples;
    j["bad_lines_skipped"] = bad_lines_skipped;
  }
  if (!tables.empty()) {
    nlohmann::json t = nlohmann::json::object();
    for (const TableStats& s : tables) {
      t[s.name()] = {
          {"rows", s.rows()},
          {"bytes", s.bytes()},
          {"bytes_per_row",
           s.rows() > 0 ? Round(static_cast<double>(s.bytes()) / static_cast<double>(s.rows()), 1)
                        : 0.0},
          {"payload_bytes_per_row", s.payload_bytes_per_row()},
          {"admitted", s.admitted()},
          {"filtered", s.filtered_lookups()},
          {"filtered_gradients", s.filtered_gradients()},
          {"evicted_by_age", s.evicted_by_age()},
          {"evicted_by_cap", s.evicted_by_cap()}};
    }
    j["tables"] = std::move(t);
  }
  return j.dump();
}

}  // namespace pstrain
