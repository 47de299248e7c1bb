#include "worker/step_push.h"

#include <cmath>
#include <numeric>

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
                              ParameterSession& params, const StepPushOptions& options) {
  StepPushResult r;
  // Sync steps reach every PS for every table, keys or none: a step counts every worker (the
  // table client does the same for tagged pushes).
  auto write = [&] {
    return params.Write(keys, grads->params, grads->rows, options.sync, &r.stale_dropped,
                        options.tag);
  };
  // The plain push: every gradient checked, then one Write from this thread.
  auto plain_push = [&] {
    r.nonfinite = NonFinite(*grads, model.params(), model.tables(), keys);
    if (r.nonfinite.empty()) r.status = options.retry ? options.retry(write) : write();
    return r;
  };
  if (!options.pipeline || !model.tables().empty()) {
    r.loss = model.ForwardBackward(in, batch, grads);
    return plain_push();
  }
  // Each group of gradients is checked before its push; after a non-finite one nothing more is
  // pushed. A model reports a group before the last only when it can promise that every
  // gradient is finite, so in practice a bad step is caught at its first group, before any push.
  std::vector<bool> reported(model.params().size(), false);
  std::vector<int> bucket;  // reported, not yet pushed
  int64_t bucket_bytes = 0;
  auto push_bucket = [&] {
    if (bucket.empty() || !r.nonfinite.empty()) return;
    r.nonfinite = NonFiniteIn(grads->params, bucket, model.params());
    if (!r.nonfinite.empty()) return;
    params.PushSome(bucket, grads->params, options.tag);
    for (int v : bucket) r.pushed_before.push_back(model.params()[v].name);
    bucket.clear();
    bucket_bytes = 0;
  };
  GradientsReady ready = [&](const std::vector<int>& vars) {
    for (int v : vars) {
      reported[v] = true;
      bucket.push_back(v);
      bucket_bytes += grads->params[v].size() * static_cast<int64_t>(sizeof(float));
    }
    if (bucket_bytes >= options.bucket_bytes) push_bucket();
  };
  r.loss = model.ForwardBackward(in, batch, grads, ready);
  // Nothing left early (a bucket never full, or a model that reported at the end).
  if (r.nonfinite.empty() && r.pushed_before.empty()) return plain_push();
  // A model that did not report every parameter: the others now, with the bucket's rest.
  for (size_t v = 0; v < reported.size(); ++v) {
    if (!reported[v]) bucket.push_back(static_cast<int>(v));
  }
  push_bucket();
  r.status = params.FinishPush(&r.stale_dropped);
  if (r.nonfinite.empty()) r.pushed_before.clear();
  if (absl::IsNotFound(r.status) && r.nonfinite.empty() && options.retry) {
    r.status = options.retry(write);
  }
  return r;
}

std::string NonFinite(const ModelGrads& grads, const std::vector<ParamSpec>& params,
                      const std::vector<TableSpec>& tables,
                      const std::vector<std::vector<uint64_t>>& keys) {
  std::vector<int> every(grads.params.size());
  std::iota(every.begin(), every.end(), 0);
  if (std::string dense = NonFiniteIn(grads.params, every, params); !dense.empty()) return dense;
  for (size_t t = 0; t < grads.rows.size(); ++t) {
    const std::vector<float>& g = grads.rows[t];
    for (size_t j = 0; j < g.size(); ++j) {
      if (!std::isfinite(g[j])) {
        return absl::StrCat("gradient for table '", tables[t].name, "' has ", g[j], " at key ",
                            keys[t][j / tables[t].dim]);
      }
    }
  }
  return "";
}

}  // namespace pstrain
