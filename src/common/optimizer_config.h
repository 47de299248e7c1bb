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

// The ranges of the hyper-parameters (docs/semantics.md, "Optimizers"). Each is wide enough
// for any setting in use (torch's and TensorFlow's defaults and the values their tutorials
// tune) and narrow enough that a value past it is a mistake: lr 1e300 turns any gradient into
// an overflow. (An update that would still overflow a value or a slot is refused by the PS.)
constexpr double kMaxLearningRate = 1e6;
constexpr double kMaxEpsilon = 1.0;         // Keras documents 1.0 for Inception; defaults are ~1e-8
constexpr double kMaxRegularization = 1e6;  // l1, l2
constexpr double kMaxInitialAccumulator = 1e6;  // adagrad's sum, ftrl's n
// A threshold compared with a gradient's norm, which a float gradient cannot pass (its scale
// is a float): any float is a meaningful clip norm.
constexpr double kMaxClipNorm = 3.4028234663852886e38;
constexpr double kMinLearningRatePower = -10.0;  // ftrl: n^-p; TensorFlow's default is -0.5

// InvalidArgument naming the first bad field and its value, e.g. "beta1 1 must be in [0, 1)":
//   name one of sgd, momentum, adagrad, adam, rmsprop, ftrl (at most kMaxNameBytes);
//   learning_rate in (0, kMaxLearningRate]; beta1, beta2, rho in [0, 1) when set (an explicit 0
//   is valid); epsilon in [0, kMaxEpsilon] when set; momentum in [0, 1); nesterov only with
//   momentum > 0; l1, l2 in [0, kMaxRegularization]; initial_accumulator_value in [0,
//   kMaxInitialAccumulator]; clip_norm in [0, kMaxClipNorm]; learning_rate_power in
//   [kMinLearningRatePower, 0] when set; schedule.kind "", "constant", "step" or "cosine"; step
//   needs step_size > 0 and decay_rate in (0, 1]; cosine needs warmup_steps >= 0, total_steps >
//   warmup_steps (unless `total_steps_filled_later` and it is 0: the chief then sets it to the
//   job's length) and 0 <= min_lr <= learning_rate.
// Every check is written so that NaN fails it. Fields an optimizer does not use are checked but
// otherwise ignored (e.g. momentum for sgd).
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config,
                                     const FieldName& name = ProtoFieldName,
                                     bool total_steps_filled_later = false);

}  // namespace pstrain
