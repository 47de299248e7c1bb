#include "common/optimizer_config.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/status.h"

namespace pstrain {
namespace {

constexpr const char* kKnownOptimizers = "sgd, momentum, adagrad, adam, rmsprop, ftrl";

bool IsKnownOptimizer(const std::string& name) {
  return name == "sgd" || name == "momentum" || name == "adagrad" || name == "adam" ||
         name == "rmsprop" || name == "ftrl";
}

bool InUnitInterval(double x) { return x >= 0.0 && x < 1.0; }  // [0, 1)
// [0, max]: also false for NaN and infinities.
bool NonNegativeUpTo(double x, double max) { return x >= 0.0 && x <= max; }

absl::Status ValidateSchedule(const OptimizerConfig& o, const FieldName& name,
                              bool total_steps_filled_later) {
  const LearningRateSchedule& s = o.schedule();
  if (s.kind().empty() || s.kind() == "constant") return absl::OkStatus();
  const std::string with = absl::StrCat(" with ", name("schedule.kind"), " ", s.kind());
  if (s.kind() == "step") {
    if (s.step_size() <= 0) {
      return InvalidArgument(name("schedule.step_size"), " ", s.step_size(), " must be positive",
                             with);
    }
    if (!(s.decay_rate() > 0.0 && s.decay_rate() <= 1.0)) {
      return InvalidArgument(name("schedule.decay_rate"), " ", s.decay_rate(), " must be in (0, 1]",
                             with);
    }
    return absl::OkStatus();
  }
  if (s.kind() == "cosine") {
    if (s.warmup_steps() < 0) {
      return InvalidArgument(name("schedule.warmup_steps"), " ", s.warmup_steps(),
                             " must be non-negative", with);
    }
    const bool filled_later = total_steps_filled_later && s.total_steps() == 0;
    if (s.total_steps() <= s.warmup_steps() && !filled_later) {
      return InvalidArgument(name("schedule.total_steps"), " ", s.total_steps(), " must exceed ",
                             name("schedule.warmup_steps"), " ", s.warmup_steps(), with);
    }
    if (!(s.min_lr() >= 0.0 && s.min_lr() <= o.learning_rate())) {
      return InvalidArgument(name("schedule.min_lr"), " ", s.min_lr(), " must be in [0, ",
                             name("learning_rate"), " ", o.learning_rate(), "]", with);
    }
    return absl::OkStatus();
  }
  return InvalidArgument(name("schedule.kind"), ": unknown learning-rate schedule \"",
                         s.kind().substr(0, 64), "\" (known: constant, step, cosine)");
}

}  // namespace

std::string ProtoFieldName(absl::string_view field) { return std::string(field); }

absl::Status ValidateOptimizerConfig(const OptimizerConfig& o, const FieldName& name,
                                     bool total_steps_filled_later) {
  if (o.name().size() > static_cast<size_t>(kMaxNameBytes) || !IsKnownOptimizer(o.name())) {
    return InvalidArgument(name("name"), " \"", o.name().substr(0, 64),
                           "\" is not a known optimizer (known: ", kKnownOptimizers, ")");
  }
  if (!(o.learning_rate() > 0.0 && o.learning_rate() <= kMaxLearningRate)) {
    return InvalidArgument(name("learning_rate"), " ", o.learning_rate(),
                           " must be positive and finite, at most ", kMaxLearningRate);
  }
  const std::pair<bool, std::pair<const char*, double>> unit[] = {
      {o.has_beta1(), {"beta1", o.beta1()}},
      {o.has_beta2(), {"beta2", o.beta2()}},
      {o.has_rho(), {"rho", o.rho()}},
      {true, {"momentum", o.momentum()}},
  };
  for (const auto& [set, field] : unit) {
    if (set && !InUnitInterval(field.second)) {
      return InvalidArgument(name(field.first), " ", field.second, " must be in [0, 1)");
    }
  }
  if (o.nesterov() && o.momentum() == 0.0) {
    return InvalidArgument(name("nesterov"), " requires ", name("momentum"), " > 0");
  }
  struct Bounded {
    bool set;
    const char* field;
    double value, max;
  };
  const Bounded non_negative[] = {
      {o.has_epsilon(), "epsilon", o.epsilon(), kMaxEpsilon},
      {true, "l1", o.l1(), kMaxRegularization},
      {true, "l2", o.l2(), kMaxRegularization},
      {true, "initial_accumulator_value", o.initial_accumulator_value(), kMaxInitialAccumulator},
      {true, "clip_norm", o.clip_norm(), kMaxClipNorm},
  };
  for (const Bounded& b : non_negative) {
    if (b.set && !NonNegativeUpTo(b.value, b.max)) {
      return InvalidArgument(name(b.field), " ", b.value,
                             " must be non-negative and finite, at most ", b.max);
    }
  }
  if (o.has_learning_rate_power() &&
      !(o.learning_rate_power() <= 0.0 && o.learning_rate_power() >= kMinLearningRatePower)) {
    return InvalidArgument(name("learning_rate_power"), " ", o.learning_rate_power(),
                           " must be non-positive and finite, at least ", kMinLearningRatePower);
  }
  return ValidateSchedule(o, name, total_steps_filled_later);
}

}  // namespace pstrain
