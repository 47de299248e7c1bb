#include "runtime/training_flags.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/half.h"
#include "common/status.h"

namespace pstrain {
namespace {

// Defaults of --model linear and wide_deep (see ToConfig).
constexpr int kCtrBatch = 256;
constexpr int kCtrEpochs = 1;
constexpr double kCtrLearningRate = 0.003;
constexpr int kTabularBatch = 32;
// A deep part (mlp, wide_deep) at 0.01 can lose every ReLU to one large early step on a few
// hundred rows (Sonar: 1 run of 4 ends predicting the base rate); 0.003 did not (12 of 12).
constexpr double kTabularLearningRate = 0.01, kTabularDeepLearningRate = 0.003;
// Default of --model wide_deep, and of linear with --schema: a cosine decay over the job gained
// about 0.001 of held-out AUC on gen-criteo's 1,000,000 rows, and lets a linear model's last
// steps settle on small tables (docs/features.md).
constexpr const char* kDecayedSchedule = "cosine";

// A flag that takes effect only when another flag has one of some values.
struct AppliesWhen {
  const char* flag;
  const char* decided_by;
  std::vector<std::string> values;
};

const std::vector<AppliesWhen>& ApplicabilityRules() {
  // The models the chief trains itself, and those of them with embedding tables.
  const std::vector<std::string> kBuiltIn = {"mlp", "linear", "wide_deep"};
  const std::vector<std::string> kWithTables = {"linear", "wide_deep"};
  static const std::vector<AppliesWhen> rules = {
      {"--beta1", "--optimizer", {"adam"}},
      {"--beta2", "--optimizer", {"adam"}},
      {"--epsilon", "--optimizer", {"adam", "rmsprop", "adagrad"}},
      {"--momentum", "--optimizer", {"momentum", "rmsprop"}},
      {"--nesterov", "--optimizer", {"momentum"}},
      {"--rho", "--optimizer", {"rmsprop"}},
      {"--initial_accumulator", "--optimizer", {"adagrad", "ftrl"}},
      {"--l1", "--optimizer", {"ftrl"}},
      {"--l2", "--optimizer", {"ftrl"}},
      {"--lr_power", "--optimizer", {"ftrl"}},
      {"--lr_step_size", "--lr_schedule", {"step"}},
      {"--lr_decay_rate", "--lr_schedule", {"step"}},
      {"--warmup_steps", "--lr_schedule", {"cosine"}},
      {"--lr_total_steps", "--lr_schedule", {"cosine"}},
      {"--min_lr", "--lr_schedule", {"cosine"}},
      {"--replicas_to_aggregate", "--mode", {"sync"}},
      {"--staleness", "--mode", {"ssp"}},
      {"--data", "--model", kBuiltIn},
      {"--test_data", "--model", kBuiltIn},
      {"--holdout", "--model", kBuiltIn},
      {"--schema", "--model", kBuiltIn},
      {"--label", "--schema", {"auto"}},
      {"--objective", "--model", kBuiltIn},
      {"--bad_lines", "--model", kBuiltIn},
      {"--push_dtype", "--model", kBuiltIn},
      {"--overlap_pull", "--model", kBuiltIn},
      {"--pipeline_push", "--model", kBuiltIn},
      {"--pipeline_push", "--mode", {"async", "ssp"}},
      {"--push_bucket_bytes", "--model", kBuiltIn},
      {"--push_bucket_bytes", "--mode", {"async", "ssp"}},
      {"--hidden", "--model", {"mlp", "wide_deep"}},
      {"--batch", "--model", kBuiltIn},
      {"--embedding_dim", "--model", {"wide_deep"}},
      {"--shared_embedding", "--model", {"wide_deep"}},
      {"--table_optimizer", "--model", kWithTables},
      {"--table_lr", "--model", kWithTables},
      {"--admit_after", "--model", kWithTables},
      {"--unadmitted_zeros", "--model", kWithTables},
      {"--evict_after_steps", "--model", kWithTables},
      {"--table_max_rows", "--model", kWithTables},
      {"--table_max_bytes", "--model", kWithTables},
  };
  return rules;
}

}  // namespace

std::string TrainingFlags::ValueOf(const std::string& flag) const {
  if (flag == "--optimizer") return optimizer_;
  if (flag == "--lr_schedule") return Schedule();
  if (flag == "--mode") return config_.mode;
  if (flag == "--schema") return config_.schema;
  return config_.model;
}

std::string TrainingFlags::Schedule() const {
  const std::vector<std::string> given = Given();
  const bool set = std::find(given.begin(), given.end(), "--lr_schedule") != given.end();
  const bool decayed =
      config_.model == "wide_deep" || (config_.model == "linear" && !config_.schema.empty());
  return decayed && !set ? kDecayedSchedule : schedule_;
}

std::vector<std::string> TrainingFlags::Given() const {
  std::vector<std::string> given;
  for (const CLI::Option* o : options_) {
    if (o->count() > 0) given.push_back(o->get_name());
  }
  return given;
}

std::vector<std::string> TrainingFlags::Inapplicable() const {
  std::vector<std::string> lines;
  const std::vector<std::string> given = Given();
  for (const AppliesWhen& r : ApplicabilityRules()) {
    if (std::find(given.begin(), given.end(), r.flag) == given.end()) continue;
    const std::string value = ValueOf(r.decided_by);
    if (std::find(r.values.begin(), r.values.end(), value) != r.values.end()) continue;
    lines.push_back(absl::StrCat(r.flag, " does not apply to ", r.decided_by, " ", value,
                                 " (only to ", absl::StrJoin(r.values, ", "), "); it is ignored"));
  }
  return lines;
}

void TrainingFlags::AddTo(CLI::App* app) {
  const size_t before = app->get_options().size();
  JobConfig& c = config_;
  app->add_option("--model", c.model,
                  "mlp, linear (logistic regression), wide_deep (Wide & Deep), or external "
                  "(client programs)")
      ->capture_default_str();
  // Data.
  app->add_option("--data", c.data,
                  "training data FORMAT:PATH, FORMAT idx (or mnist: a directory), csv, libsvm or "
                  "criteo; a bare PATH is an MNIST-layout directory")
      ->capture_default_str();
  app->add_option("--test_data", c.test_data,
                  "held-out data FORMAT:PATH (default: the last --holdout of --data; idx: its "
                  "t10k split)");
  app->add_option("--schema", c.schema,
                  "feature columns of a CSV file: a schema file (JSON or YAML, "
                  "docs/features.md; pstrain infer-schema writes one), or auto to infer one from "
                  "the training records");
  app->add_option("--label", c.label,
                  "with --schema auto: the label column's name (default: the first column)");
  app->add_option("--objective", c.objective,
                  "classification or regression (mean squared error; RMSE and MAE); default: the "
                  "schema's task, or classification")
      ->check(CLI::IsMember({"classification", "regression"}));
  app->add_option("--holdout", c.holdout, "fraction of a text file's records held out")
      ->capture_default_str();
  app->add_option("--bad_lines", bad_lines_,
                  "a malformed data line: stop (the job fails, naming file:line) or skip (count "
                  "it)")
      ->capture_default_str();
  // Model.
  app->add_option("--hidden", c.hidden, "hidden layer widths, comma separated")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--embedding_dim", c.embedding_dim, "wide_deep: embedding width per field")
      ->capture_default_str();
  app->add_flag("--shared_embedding", c.shared_embedding,
                "wide_deep: one hashed table for every categorical field");
  // Embedding tables.
  app->add_option("--table_optimizer", table_optimizer_, "sgd, adagrad, adam or ftrl")
      ->capture_default_str();
  app->add_option("--table_lr", table_lr_, "learning rate of the tables")->capture_default_str();
  app->add_option("--admit_after", c.admit_after,
                  "a key gets a trainable row once looked up this often (0, 1: at once)")
      ->capture_default_str();
  app->add_flag("--unadmitted_zeros", c.unadmitted_zeros,
                "a key not admitted yet reads zeros (else its initial row)");
  app->add_option("--evict_after_steps", c.evict_after_steps,
                  "a row not updated for this many table steps is evicted (0: never)")
      ->capture_default_str();
  app->add_option("--table_max_rows", c.table_max_rows,
                  "rows per table over all PS; least recently updated evicted first (0: no cap)")
      ->capture_default_str();
  app->add_option("--table_max_bytes", c.table_max_bytes,
                  "bytes per table over all PS, slots and index included (0: no cap)")
      ->capture_default_str();
  app->add_option("--batch", c.batch_size,
                  absl::StrCat("examples per step and worker (linear, wide_deep: ", kCtrBatch, ")"))
      ->capture_default_str();
  app->add_option("--epochs", epochs_,
                  absl::StrCat("passes over the training data, or auto: from the data's size "
                               "(linear, wide_deep: ",
                               kCtrEpochs, "; with --schema: auto)"))
      ->capture_default_str();
  app->add_option("--seed", c.seed, "seed for initialisation and shuffling")->capture_default_str();
  // Consistency.
  app->add_option("--mode", c.mode, "async, sync or ssp")->capture_default_str();
  app->add_option("--push_dtype", push_dtype_,
                  "element type of pushed dense gradients on the wire: float32, float16 or "
                  "bfloat16 (half the bytes; the PS widens them and keeps float32)")
      ->capture_default_str();
  app->add_flag("--overlap_pull", c.overlap_pull,
                "async and ssp: pull the next step's values while this step computes and pushes "
                "(faster; every gradient is then one step staler, in ssp one beyond --staleness)");
  app->add_flag(
      "--pipeline_push,!--no_pipeline_push", c.pipeline_push,
      "async and ssp: push layers' gradients (in buckets of at least 1 MB) as soon as the "
      "backward pass has them, while it goes on below; the step still waits for every push, "
      "and a step with a non-finite gradient pushes nothing (off by default: on 2 cores it "
      "was slower than one push after the backward pass, docs/data_plane.md)");
  app->add_option("--push_bucket_bytes", c.push_bucket_bytes,
                  "with --pipeline_push: gradients ready early wait until they make this many "
                  "bytes, then go in one push (0: each layer as it is ready)")
      ->capture_default_str();
  app->add_option("--replicas_to_aggregate", c.replicas_to_aggregate,
                  "sync: gradients averaged per step; more workers are backups (0 = all)")
      ->capture_default_str();
  app->add_option("--staleness", c.staleness, "ssp: clocks a worker may run ahead")
      ->capture_default_str();
  // Placement.
  app->add_option("--partitioner", c.partitioner, "none, fixed:N, min_bytes:B or max_bytes:B")
      ->capture_default_str();
  app->add_option("--placement", c.placement, "round_robin or greedy (by bytes)")
      ->capture_default_str();
  // Optimizer.
  app->add_option("--optimizer", optimizer_, "sgd, momentum, adagrad, adam, rmsprop or ftrl")
      ->capture_default_str();
  app->add_option("--lr", lr_,
                  absl::StrCat("learning rate (linear, wide_deep: ", kCtrLearningRate, ")"))
      ->capture_default_str();
  app->add_option("--beta1", beta1_, "adam (default 0.9)");
  app->add_option("--beta2", beta2_, "adam (default 0.999)");
  app->add_option("--epsilon", epsilon_, "adam, rmsprop, adagrad");
  app->add_option("--momentum", momentum_, "momentum, rmsprop")->capture_default_str();
  app->add_flag("--nesterov", nesterov_, "momentum: Nesterov's variant");
  app->add_option("--rho", rho_, "rmsprop's smoothing constant (default 0.99)");
  app->add_option("--initial_accumulator", initial_accumulator_, "adagrad, ftrl");
  app->add_option("--l1", l1_, "ftrl")->capture_default_str();
  app->add_option("--l2", l2_, "ftrl")->capture_default_str();
  app->add_option("--lr_power", lr_power_, "ftrl (default -0.5)");
  app->add_option("--clip_norm", clip_norm_, "clip each gradient to this L2 norm (0 = off)")
      ->capture_default_str();
  app->add_option(
         "--lr_schedule", schedule_,
         absl::StrCat("constant, step or cosine (wide_deep, and with --schema linear and an mlp's "
                      "regression: ",
                      kDecayedSchedule, ")"))
      ->capture_default_str();
  app->add_option("--lr_step_size", step_size_, "step schedule: steps between decays");
  app->add_option("--lr_decay_rate", decay_rate_, "step schedule: factor per decay");
  app->add_option("--warmup_steps", warmup_steps_, "cosine schedule: linear warm-up steps");
  app->add_option("--lr_total_steps", total_steps_, "cosine schedule: step where it ends");
  app->add_option("--min_lr", min_lr_, "cosine schedule: final learning rate");
  // Faults.
  app->add_option("--task_timeout", task_timeout_s_,
                  "seconds a worker may stay silent, and a pull may wait for a step or clock")
      ->capture_default_str();
  app->add_option("--task_rows", c.task_rows,
                  "rows per task of the chief's task queue, which also turns recovery on "
                  "(-1: auto, up to 200 batches; 0: a fixed shard per worker, no recovery)")
      ->capture_default_str();
  app->add_option("--rows", c.rows,
                  "--model external: the rows of the programs' data, which the chief cuts into "
                  "tasks that the programs take (Client::NextTask; Python client.tasks())")
      ->capture_default_str();
  app->add_option("--heartbeat_secs", c.heartbeat_secs,
                  "task queue: seconds between a worker's heartbeats")
      ->capture_default_str();
  app->add_option("--heartbeat_timeout_secs", c.heartbeat_timeout_secs,
                  "task queue: silence after which a worker is declared dead and replaceable")
      ->capture_default_str();
  app->add_option("--nonfinite", nonfinite_,
                  "a NaN/Inf gradient: skip (count it, go on) or stop (end the job)")
      ->capture_default_str();
  // Checkpoints.
  app->add_option("--checkpoint_dir", c.checkpoint_dir,
                  "save checkpoints here (periodically with the two flags below, and at the end)");
  app->add_option("--checkpoint_every_steps", c.checkpoint_every_steps,
                  "save every this many global steps (0: not by steps)")
      ->capture_default_str();
  app->add_option("--checkpoint_every_secs", c.checkpoint_every_secs,
                  "save every this many seconds (0: not by time)")
      ->capture_default_str();
  app->add_option("--keep_checkpoints", c.keep_checkpoints, "the newest checkpoints kept")
      ->capture_default_str();
  app->add_option("--restore_from", c.restore_from,
                  "start from a checkpoint: a checkpoint directory (its newest valid one) or one "
                  "ckpt-<step> in it");
  app->add_option("--resume", resume_,
                  "continue a job: --checkpoint_dir DIR, restored from its newest valid "
                  "checkpoint if it has one");
  // Set by a supervisor (pstrain launch) on a chief it restarted, not by hand: hidden.
  app->add_flag("--restarted", c.restarted,
                "this chief replaces one that died: it resumes from --restore_from and counts "
                "the restart")
      ->group("");
  app->add_option("--slow_worker", c.slow_worker, "testing: index of a worker made slow");
  app->add_option("--slow_worker_delay_ms", c.slow_worker_delay_ms,
                  "testing: its delay before each step");
  app->add_option("--eval_delay_ms", c.eval_delay_ms,
                  "testing: the chief's delay before the final evaluation");
  app->add_option("--end_delay_ms", c.end_delay_ms,
                  "testing: the chief's delay after it told the tasks to stop");
  const std::vector<CLI::Option*> all = app->get_options();
  options_.assign(all.begin() + before, all.end());
}

absl::StatusOr<JobConfig> TrainingFlags::ToConfig() const {
  JobConfig c = config_;
  const std::vector<std::string> given = Given();
  auto unset = [&](const char* flag) {
    return std::find(given.begin(), given.end(), flag) == given.end();
  };
  double lr = lr_;
  if (epochs_ == "auto") {
    c.epochs = kAutoEpochs;
  } else if (!absl::SimpleAtoi(epochs_, &c.epochs) || c.epochs < 1) {
    return InvalidArgument("--epochs ", epochs_, ": give a number of at least 1, or auto");
  }
  // The CTR models' own defaults where the MNIST job's do not suit them: larger batches (many
  // small sparse updates per example) and a faster dense learning rate, measured on
  // `pstrain gen-criteo` data.
  if (c.model == "linear" || c.model == "wide_deep") {
    if (unset("--batch")) c.batch_size = kCtrBatch;
    if (unset("--epochs")) c.epochs = kCtrEpochs;
    if (unset("--lr")) lr = kCtrLearningRate;
  }
  // A table through feature columns may have a hundred rows or millions: epochs from its size,
  // and the small batches and faster rate that converge on the small ones (docs/features.md).
  if (!c.schema.empty()) {
    if (unset("--batch")) c.batch_size = kTabularBatch;
    if (unset("--epochs")) c.epochs = kAutoEpochs;
    if (unset("--lr")) lr = c.model == "linear" ? kTabularLearningRate : kTabularDeepLearningRate;
  }
  OptimizerConfig& o = c.optimizer;
  o.set_name(optimizer_);
  o.set_learning_rate(lr);
  if (beta1_) o.set_beta1(*beta1_);
  if (beta2_) o.set_beta2(*beta2_);
  if (epsilon_) o.set_epsilon(*epsilon_);
  if (rho_) o.set_rho(*rho_);
  if (lr_power_) o.set_learning_rate_power(*lr_power_);
  o.set_momentum(momentum_);
  o.set_nesterov(nesterov_);
  o.set_initial_accumulator_value(initial_accumulator_);
  o.set_l1(l1_);
  o.set_l2(l2_);
  o.set_clip_norm(clip_norm_);
  LearningRateSchedule* s = o.mutable_schedule();
  s->set_kind(Schedule());
  s->set_step_size(step_size_);
  s->set_decay_rate(decay_rate_);
  s->set_warmup_steps(warmup_steps_);
  s->set_total_steps(total_steps_);
  s->set_min_lr(min_lr_);
  // An MLP's regression decays as the linear model does; its classifier keeps a constant rate
  // (docs/features.md: on Sonar a cosine cost it 0.011 of accuracy). A cosine's own flag without
  // --lr_schedule keeps the constant rate, as its warning says.
  c.cosine_if_regression = c.model == "mlp" && !c.schema.empty() && unset("--lr_schedule") &&
                           unset("--warmup_steps") && unset("--lr_total_steps") &&
                           unset("--min_lr");
  if (nonfinite_ != "skip" && nonfinite_ != "stop") {
    return absl::InvalidArgumentError(
        absl::StrCat("--nonfinite must be skip or stop, not \"", nonfinite_, "\""));
  }
  c.stop_on_nonfinite = nonfinite_ == "stop";
  absl::StatusOr<DataType> push_dtype = DtypeFromName(push_dtype_);
  if (!push_dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--push_dtype: ", push_dtype.status().message()));
  }
  c.push_dtype = *push_dtype;
  if (bad_lines_ != "skip" && bad_lines_ != "stop") {
    return absl::InvalidArgumentError(
        absl::StrCat("--bad_lines must be skip or stop, not \"", bad_lines_, "\""));
  }
  c.skip_bad_lines = bad_lines_ == "skip";
  c.table_optimizer.set_name(table_optimizer_);
  c.table_optimizer.set_learning_rate(table_lr_);
  c.table_optimizer_given = !unset("--table_optimizer") || !unset("--table_lr");
  if (!(task_timeout_s_ > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task_timeout ", task_timeout_s_, " must be positive"));
  }
  c.task_timeout = absl::Seconds(task_timeout_s_);
  if (!resume_.empty()) {
    if (!unset("--checkpoint_dir") || !unset("--restore_from")) {
      return absl::InvalidArgumentError(
          "--resume DIR sets --checkpoint_dir and --restore_from: give it alone");
    }
    c.checkpoint_dir = c.restore_from = resume_;
    c.restore_if_any = true;
  }
  if (absl::Status st = c.Validate(); !st.ok()) return st;
  return c;
}

}  // namespace pstrain
