#include "cli/training_flags.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

void TrainingFlags::AddTo(CLI::App* app) {
  JobConfig& c = config_;
  app->add_option("--model", c.model, "mlp (built-in MNIST job) or external (client programs)")
      ->capture_default_str();
  app->add_option("--data", c.data_dir, "directory with the MNIST-layout IDX files")
      ->capture_default_str();
  app->add_option("--hidden", c.hidden, "hidden layer widths, comma separated")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--batch", c.batch_size, "examples per step and worker")->capture_default_str();
  app->add_option("--epochs", c.epochs, "passes over the training data")->capture_default_str();
  app->add_option("--seed", c.seed, "seed for initialisation and shuffling")->capture_default_str();
  // Consistency.
  app->add_option("--mode", c.mode, "async, sync or ssp")->capture_default_str();
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
  app->add_option("--lr", lr_, "learning rate")->capture_default_str();
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
  app->add_option("--lr_schedule", schedule_, "constant, step or cosine")->capture_default_str();
  app->add_option("--lr_step_size", step_size_, "step schedule: steps between decays");
  app->add_option("--lr_decay_rate", decay_rate_, "step schedule: factor per decay");
  app->add_option("--warmup_steps", warmup_steps_, "cosine schedule: linear warm-up steps");
  app->add_option("--lr_total_steps", total_steps_, "cosine schedule: step where it ends");
  app->add_option("--min_lr", min_lr_, "cosine schedule: final learning rate");
  // Faults.
  app->add_option("--task_timeout", task_timeout_s_,
                  "seconds a worker may stay silent, and a pull may wait for a step or clock")
      ->capture_default_str();
  app->add_option("--nonfinite", nonfinite_,
                  "a NaN/Inf gradient: skip (count it, go on) or stop (end the job)")
      ->capture_default_str();
  app->add_option("--slow_worker", c.slow_worker, "testing: index of a worker made slow");
  app->add_option("--slow_worker_delay_ms", c.slow_worker_delay_ms,
                  "testing: its delay before each step");
}

absl::StatusOr<JobConfig> TrainingFlags::ToConfig() const {
  JobConfig c = config_;
  OptimizerConfig& o = c.optimizer;
  o.set_name(optimizer_);
  o.set_learning_rate(lr_);
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
  s->set_kind(schedule_);
  s->set_step_size(step_size_);
  s->set_decay_rate(decay_rate_);
  s->set_warmup_steps(warmup_steps_);
  s->set_total_steps(total_steps_);
  s->set_min_lr(min_lr_);
  if (nonfinite_ != "skip" && nonfinite_ != "stop") {
    return absl::InvalidArgumentError(
        absl::StrCat("--nonfinite must be skip or stop, not \"", nonfinite_, "\""));
  }
  c.stop_on_nonfinite = nonfinite_ == "stop";
  if (!(task_timeout_s_ > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task_timeout ", task_timeout_s_, " must be positive"));
  }
  c.task_timeout = absl::Seconds(task_timeout_s_);
  if (absl::Status st = c.Validate(); !st.ok()) return st;
  return c;
}

}  // namespace pstrain
