#include "worker/step_push.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// The first non-finite value of the gradients of `vars`, as NonFinite names it, or "".
std::string NonFiniteIn(const std::vector<Tensor>& grads, const std::vector<int>& vars,
                        const std::vector<ParamSpec>& params) {
  for (int i : vars) {
    const Tensor& g = grads[i];
    for (int64_t j = 0; j < g.size(); ++j) {
      if (!std::isfinite(g.values[j])) {
        return absl::StrCat("gradient for variable '", params[i].name, "' has ", g.values[j],
                            " at index ", j);
      }
    }
  }
  return "";
}

}  // namespace

StepPushResult ComputeAndPush(Model& model, const ModelInputs& in, const Examples& batch,
                              const std::vector<std::vector<uint64_t>>& keys, ModelGrads* grads,
                              ModelParameters& params, const StepPushOptions& options) {
  StepPushResult r;
  auto write = [&] {
    return params.Write(keys, *grads, options.sync, &r.stale_dropped, options.tag);
  };
  auto written = [&] { return options.retry ? options.retry(write) : write(); };
  if (!options.pipeline || !model.tables().empty()) {
    r.loss = model.ForwardBackward(in, batch, grads);
    r.nonfinite = NonFinite(*grads, model.params(), model.tables(), keys);
    if (r.nonfinite.empty()) r.status = written();
    return r;
  }
  // Each group of gradients is checked before its push; after a non-finite one nothing more is
  // pushed. A model reports a group before the last only when it can promise that every
  // gradient is finite, so in practice a bad step is caught at its first group, before any push.
  std::vector<bool> reported(model.params().size(), false);
  GradientsReady ready = [&](const std::vector<int>& vars) {
    for (int v : vars) reported[v] = true;
    if (!r.nonfinite.empty()) return;
    r.nonfinite = NonFiniteIn(grads->params, vars, model.params());
    if (!r.nonfinite.empty()) return;
    params.PushSome(vars, grads->params, options.tag);
    for (int v : vars) r.pushed_before.push_back(model.params()[v].name);
  };
  r.loss = model.ForwardBackward(in, batch, grads, ready);
  std::vector<int> rest;  // a model that did not report every parameter: the others now
  for (size_t v = 0; v < reported.size(); ++v) {
    if (!reported[v]) rest.push_back(static_cast<int>(v));
  }
  if (!rest.empty()) ready(rest);
  r.status = params.FinishPush(&r.stale_dropped);
  if (r.nonfinite.empty()) r.pushed_before.clear();
  if (absl::IsNotFound(r.status) && r.nonfinite.empty() && options.retry) {
    r.status = options.retry(write);
  }
  return r;
}

}  // namespace pstrain
