#include "master/specs.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/optimizer_config.h"
#include "common/status.h"
#include "model/model.h"

namespace pstrain {
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

absl::StatusOr<NewVariable> VariableFromSpec(const VariableSpec& spec,
                                             const OptimizerConfig& default_optimizer) {
  if (spec.name().empty()) return InvalidArgument("a variable needs a name");
  if (spec.name().size() > static_cast<size_t>(kMaxNameBytes)) {
    return InvalidArgument("variable name of ", spec.name().size(), " bytes exceeds ",
                           kMaxNameBytes);
  }
  const std::string where = absl::StrCat("variable '", spec.name(), "': ");
  if (spec.partitioner().size() > static_cast<size_t>(kMaxNameBytes)) {
    return InvalidArgument(where, "partitioner text of ", spec.partitioner().size(),
                           " bytes exceeds ", kMaxNameBytes);
  }
  const InitializerDef& d = spec.initializer();
  if (d.kind().size() > static_cast<size_t>(kMaxNameBytes)) {
    return InvalidArgument(where, "initializer kind of ", d.kind().size(), " bytes exceeds ",
                           kMaxNameBytes);
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
    return InvalidArgument(where, probe.status().message());
  }
  NewVariable v;
  v.name = spec.name();
  v.shape.assign(spec.shape().begin(), spec.shape().end());
  if (spec.has_optimizer() && spec.optimizer().ByteSizeLong() > 0) {
    if (spec.optimizer().name().empty()) {
      return InvalidArgument(
          where,
          "the optimizer has fields set but no name; name it, or send no optimizer to "
          "use the job's (",
          default_optimizer.name(), ")");
    }
    auto field = [](absl::string_view f) { return absl::StrCat("optimizer.", f); };
    if (absl::Status s = ValidateOptimizerConfig(spec.optimizer(), field); !s.ok()) {
      return InvalidArgument(where, s.message());
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
