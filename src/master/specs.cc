#include "master/specs.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "model/model.h"

namespace pstrain {
namespace {

constexpr const char* kKnownOptimizers = "sgd, momentum, adagrad, adam, rmsprop, ftrl";

bool IsKnownOptimizer(const std::string& name) {
  return name == "sgd" || name == "momentum" || name == "adagrad" || name == "adam" ||
         name == "rmsprop" || name == "ftrl";
}

// Written so that NaN fails them.
bool InUnitInterval(double x) { return x >= 0.0 && x < 1.0; }
bool NonNegativeFinite(double x) { return std::isfinite(x) && x >= 0.0; }

absl::Status Bad(const auto&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

absl::Status ValidateSchedule(const OptimizerConfig& o, const FieldName& name,
                              bool total_steps_filled_later) {
  const LearningRateSchedule& s = o.schedule();
  const std::string with = absl::StrCat(" with ", name("schedule.kind"), " ", s.kind());
  if (s.kind().empty() || s.kind() == "constant") return absl::OkStatus();
  if (s.kind() == "step") {
    if (s.step_size() <= 0) {
      return Bad(name("schedule.step_size"), " must be positive", with, ", got ", s.step_size());
    }
    if (!(s.decay_rate() > 0.0 && s.decay_rate() <= 1.0)) {
      return Bad(name("schedule.decay_rate"), " must be in (0, 1]", with, ", got ", s.decay_rate());
    }
    return absl::OkStatus();
  }
  if (s.kind() == "cosine") {
    if (s.warmup_steps() < 0) {
      return Bad(name("schedule.warmup_steps"), " must be non-negative", with, ", got ",
                 s.warmup_steps());
    }
    if (s.total_steps() < 0 || (s.total_steps() <= s.warmup_steps() &&
                                !(total_steps_filled_later && s.total_steps() == 0))) {
      return Bad(name("schedule.total_steps"), " must exceed ", name("schedule.warmup_steps"), " (",
                 s.warmup_steps(), ")", with, ", got ", s.total_steps());
    }
    if (!(s.min_lr() >= 0.0 && s.min_lr() <= o.learning_rate())) {
      return Bad(name("schedule.min_lr"), " must be in [0, ", name("learning_rate"), " ",
                 o.learning_rate(), "]", with, ", got ", s.min_lr());
    }
    return absl::OkStatus();
  }
  return Bad(name("schedule.kind"), ": unknown learning-rate schedule \"", s.kind(),
             "\" (known: constant, step, cosine)");
}

}  // namespace

std::string FlagName(absl::string_view field) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"name", "--optimizer"},
      {"learning_rate", "--lr"},
      {"initial_accumulator_value", "--initial_accumulator"},
      {"learning_rate_power", "--lr_power"},
      {"schedule.kind", "--lr_schedule"},
      {"schedule.step_size", "--lr_step_size"},
      {"schedule.decay_rate", "--lr_decay_rate"},
      {"schedule.warmup_steps", "--warmup_steps"},
      {"schedule.total_steps", "--lr_total_steps"},
      {"schedule.min_lr", "--min_lr"},
  };
  for (const auto& [f, flag] : kFlags) {
    if (field == f) return flag;
  }
  return absl::StrCat("--", field);  // beta1, beta2, epsilon, momentum, nesterov, rho, l1, ...
}

absl::Status ValidateOptimizer(const OptimizerConfig& o, const FieldName& name,
                               bool total_steps_filled_later) {
  if (o.name().size() > static_cast<size_t>(kMaxNameBytes) || !IsKnownOptimizer(o.name())) {
    return Bad(name("name"), ": unknown optimizer \"", o.name().substr(0, 64),
               "\" (known: ", kKnownOptimizers, ")");
  }
  if (!(std::isfinite(o.learning_rate()) && o.learning_rate() > 0.0)) {
    return Bad(name("learning_rate"), ": learning rate ", o.learning_rate(),
               " must be positive and finite");
  }
  const std::pair<bool, std::pair<const char*, double>> unit[] = {
      {o.has_beta1(), {"beta1", o.beta1()}},
      {o.has_beta2(), {"beta2", o.beta2()}},
      {o.has_rho(), {"rho", o.rho()}},
      {true, {"momentum", o.momentum()}},
  };
  for (const auto& [set, field] : unit) {
    if (set && !InUnitInterval(field.second)) {
      return Bad(name(field.first), " must be in [0, 1), got ", field.second);
    }
  }
  if (o.nesterov() && o.momentum() == 0.0) {
    return Bad(name("nesterov"), " needs ", name("momentum"), " > 0");
  }
  const std::pair<bool, std::pair<const char*, double>> non_negative[] = {
      {o.has_epsilon(), {"epsilon", o.epsilon()}},
      {true, {"l1", o.l1()}},
      {true, {"l2", o.l2()}},
      {true, {"initial_accumulator_value", o.initial_accumulator_value()}},
      {true, {"clip_norm", o.clip_norm()}},
  };
  for (const auto& [set, field] : non_negative) {
    if (set && !NonNegativeFinite(field.second)) {
      return Bad(name(field.first), " must be non-negative and finite, got ", field.second);
    }
  }
  if (o.has_learning_rate_power() &&
      !(std::isfinite(o.learning_rate_power()) && o.learning_rate_power() <= 0.0)) {
    return Bad(name("learning_rate_power"), " must be non-positive and finite, got ",
               o.learning_rate_power());
  }
  return ValidateSchedule(o, name, total_steps_filled_later);
}

absl::StatusOr<NewVariable> VariableFromSpec(const VariableSpec& spec,
                                             const OptimizerConfig& default_optimizer) {
  if (spec.name().empty()) return Bad("a variable needs a name");
  if (spec.name().size() > static_cast<size_t>(kMaxNameBytes)) {
    return Bad("variable name of ", spec.name().size(), " bytes exceeds ", kMaxNameBytes);
  }
  const std::string where = absl::StrCat("variable '", spec.name(), "': ");
  if (spec.partitioner().size() > static_cast<size_t>(kMaxNameBytes)) {
    return Bad(where, "partitioner text of ", spec.partitioner().size(), " bytes exceeds ",
               kMaxNameBytes);
  }
  const InitializerDef& d = spec.initializer();
  if (d.kind().size() > static_cast<size_t>(kMaxNameBytes)) {
    return Bad(where, "initializer kind of ", d.kind().size(), " bytes exceeds ", kMaxNameBytes);
  }
  Initializer init;
  init.kind = d.kind().empty() ? "zeros" : d.kind();
  init.value = d.value();
  init.low = d.low();
  init.high = d.high();
  init.mean = d.mean();
  init.stddev = d.stddev();
  init.seed = d.seed();
  // A scalar draw checks the kind and its parameters without allocating the variable.
  if (absl::StatusOr<Tensor> probe = MakeInitialValue({}, init); !probe.ok()) {
    return Bad(where, probe.status().message());
  }
  NewVariable v;
  v.name = spec.name();
  v.shape.assign(spec.shape().begin(), spec.shape().end());
  if (spec.has_optimizer() && spec.optimizer().ByteSizeLong() > 0) {
    if (spec.optimizer().name().empty()) {
      return Bad(where,
                 "the optimizer has fields set but no name; name it, or send no optimizer to "
                 "use the job's (",
                 default_optimizer.name(), ")");
    }
    auto field = [](absl::string_view f) { return absl::StrCat("optimizer.", f); };
    if (absl::Status s = ValidateOptimizer(spec.optimizer(), field); !s.ok()) {
      return Bad(where, s.message());
    }
    v.optimizer = spec.optimizer();
  } else {
    v.optimizer = default_optimizer;
  }
  std::vector<int64_t> shape = v.shape;
  v.initial_value = [shape, init]() { return MakeInitialValue(shape, init); };
  return v;
}

}  // namespace pstrain
