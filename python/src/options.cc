#include "options.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "errors.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

// The dict of `obj._options()`, or InvalidArgumentError naming what was expected.
py::dict OptionsOf(py::handle obj, const char* module, const char* what) {
  if (!py::hasattr(obj, "_options")) {
    RaiseInvalidArgument(absl::StrCat(what, " must be a ", module, " object or None, not a ",
                                      std::string(py::str(obj.get_type().attr("__name__")))));
  }
  return obj.attr("_options")().cast<py::dict>();
}

template <typename T>
void Get(const py::dict& d, const char* key, T* out) {
  if (d.contains(key) && !d[key].is_none()) *out = d[key].cast<T>();
}

template <typename T>
void Get(const py::dict& d, const char* key, std::optional<T>* out) {
  if (d.contains(key) && !d[key].is_none()) *out = d[key].cast<T>();
}

ScheduleOptions ToSchedule(const py::dict& d) {
  ScheduleOptions s;
  Get(d, "kind", &s.kind);
  Get(d, "step_size", &s.step_size);
  Get(d, "decay_rate", &s.decay_rate);
  Get(d, "warmup_steps", &s.warmup_steps);
  Get(d, "total_steps", &s.total_steps);
  Get(d, "min_lr", &s.min_lr);
  return s;
}

}  // namespace

std::optional<OptimizerOptions> ToOptimizer(py::handle optimizer) {
  if (optimizer.is_none()) return std::nullopt;
  const py::dict d = OptionsOf(optimizer, "pstrain.optim", "optimizer");
  OptimizerOptions o;
  Get(d, "name", &o.name);
  Get(d, "learning_rate", &o.learning_rate);
  Get(d, "beta1", &o.beta1);
  Get(d, "beta2", &o.beta2);
  Get(d, "epsilon", &o.epsilon);
  Get(d, "momentum", &o.momentum);
  Get(d, "nesterov", &o.nesterov);
  Get(d, "initial_accumulator_value", &o.initial_accumulator_value);
  Get(d, "rho", &o.rho);
  Get(d, "l1", &o.l1);
  Get(d, "l2", &o.l2);
  Get(d, "learning_rate_power", &o.learning_rate_power);
  Get(d, "clip_norm", &o.clip_norm);
  if (d.contains("schedule") && !d["schedule"].is_none()) {
    o.schedule = ToSchedule(d["schedule"].cast<py::dict>());
  }
  return o;
}

InitializerOptions ToInitializer(py::handle initializer) {
  InitializerOptions o;
  if (initializer.is_none()) return o;
  const py::dict d = OptionsOf(initializer, "pstrain.init", "initializer");
  Get(d, "kind", &o.kind);
  Get(d, "value", &o.value);
  Get(d, "low", &o.low);
  Get(d, "high", &o.high);
  Get(d, "mean", &o.mean);
  Get(d, "stddev", &o.stddev);
  Get(d, "seed", &o.seed);
  return o;
}

}  // namespace pstrain::python
