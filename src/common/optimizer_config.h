// The one check of an optimizer's configuration (proto OptimizerConfig), used wherever one
// arrives: the PS before it builds an optimizer, the chief before it creates a variable, the
// command line before any process starts. Only the names of the fields in the messages differ.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ps.pb.h"

namespace pstrain {

// How a field of OptimizerConfig (its proto path, e.g. "schedule.step_size") is named in
// messages: as itself by default, as a command-line flag ("--lr_step_size"), or with a prefix.
using FieldName = std::function<std::string(absl::string_view field)>;
std::string ProtoFieldName(absl::string_view field);

// InvalidArgument naming the first bad field and its value, e.g. "beta1 1 must be in [0, 1)":
//   name one of sgd, momentum, adagrad, adam, rmsprop, ftrl (at most kMaxNameBytes);
//   learning_rate finite and > 0; beta1, beta2, rho in [0, 1) when set (an explicit 0 is
//   valid); epsilon finite and >= 0 when set; momentum in [0, 1); nesterov only with momentum >
//   0; l1, l2, initial_accumulator_value and clip_norm finite and >= 0; learning_rate_power
//   finite and <= 0 when set; schedule.kind "", "constant", "step" or "cosine"; step needs
//   step_size > 0 and decay_rate in (0, 1]; cosine needs warmup_steps >= 0, total_steps >
//   warmup_steps (unless `total_steps_filled_later` and it is 0: the chief then sets it to the
//   job's length) and 0 <= min_lr <= learning_rate.
// Every check is written so that NaN fails it. Fields an optimizer does not use are checked but
// otherwise ignored (e.g. momentum for sgd).
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config,
                                     const FieldName& name = ProtoFieldName,
                                     bool total_steps_filled_later = false);

}  // namespace pstrain
