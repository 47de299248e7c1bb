// The training flags of `pstrain server` (chief), `pstrain launch` and the Python extension's
// chief (pstrain.Server), parsed into a JobConfig. Public header of src/runtime beside
// runtime.h, for the command line parsers of src/cli and python/src.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "master/master.h"

namespace pstrain {

class TrainingFlags {
 public:
  // Adds every training flag to `app`.
  void AddTo(CLI::App* app);
  // The parsed flags as a job configuration, validated; errors name the flag ("--clip_norm -1
  // must be non-negative and finite").
  absl::StatusOr<JobConfig> ToConfig() const;
  // The training flags given on the command line ("--epochs", ...), in definition order.
  std::vector<std::string> Given() const;
  // One message per given flag that has no effect with the others, e.g. "--beta1 does not apply
  // to --optimizer sgd (only to adam)".
  std::vector<std::string> Inapplicable() const;

 private:
  // The value of the flag that decides whether others apply: --optimizer, --lr_schedule, --mode
  // or --model.
  std::string ValueOf(const std::string& flag) const;
  // --lr_schedule, or the model's default when it is not given.
  std::string Schedule() const;

  std::vector<CLI::Option*> options_;  // every flag AddTo defined, owned by the app
  JobConfig config_;
  std::string optimizer_ = "adam";
  double lr_ = 0.001;
  std::optional<double> beta1_, beta2_, epsilon_, rho_, lr_power_;
  double momentum_ = 0, initial_accumulator_ = 0, l1_ = 0, l2_ = 0, clip_norm_ = 0;
  bool nesterov_ = false;
  std::string schedule_ = "constant";
  int64_t step_size_ = 0, warmup_steps_ = 0, total_steps_ = 0;
  double decay_rate_ = 0, min_lr_ = 0;
  std::string nonfinite_ = "skip";
  std::string push_dtype_ = "float32";
  std::string bad_lines_ = "stop";
  std::string table_optimizer_ = "adagrad";
  double table_lr_ = 0.1;
  double task_timeout_s_ = 120;
  std::string resume_;
  std::string epochs_ = "3";
};

}  // namespace pstrain
