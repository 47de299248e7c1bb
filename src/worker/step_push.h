// Internal to src/worker: a step's forward and backward pass and the push of its gradients,
// one Write after the backward pass or pipelined (each variable pushed once the model reports
// its gradient final, while the backward pass of the layers below goes on), and the check that
// keeps a step with a non-finite gradient from being applied (docs/data_plane.md, "Overlap").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/session.h"
#include "common/examples.h"
#include "model/model.h"

namespace pstrain {

struct StepPushOptions {
  bool sync = false;      // Write's `sync`
  bool pipeline = false;  // push as the model reports gradients ready (a model without tables)
  // Pipelined: gradients reported ready wait in a bucket until it holds at least this many
  // bytes, as PyTorch DDP's buckets do, so that small layers do not cost a request each; what
  // is left is pushed after the backward pass. 0: every report is pushed at once.
  int64_t bucket_bytes = 0;
  const PushTag* tag = nullptr;
  // Runs a plain Write, again as long as the caller allows (the recovery's wait for a PS that
  // restarted); empty: once. A pipelined push that failed NotFound is redone whole this way.
  std::function<absl::Status(const std::function<absl::Status()>&)> retry;
};

struct StepPushResult {
  float loss = 0;
  // The first non-finite gradient ("gradient for variable 'x' has nan at index i"), or "". The
  // step's push stopped before it: nothing of the step was pushed unless `pushed_before` names
  // variables, which happens only when a model reported gradients early and then broke
  // GradientsReady's promise of finite ones.
  std::string nonfinite;
  std::vector<std::string> pushed_before;
  int stale_dropped = 0;  // shards the PS dropped as stale
  absl::Status status;    // of the push
};

// Forward and backward of `batch` (its keys as model.TouchedKeys gave them) from the values of
// the last params.Read, then the push of *grads unless a gradient is non-finite.
StepPushResult ComputeAndPush(Model& model, const ModelInputs& in, const Examples& batch,
                              const std::vector<std::vector<uint64_t>>& keys, ModelGrads* grads,
                              ParameterSession& params, const StepPushOptions& options);

// The first non-finite value of `grads`, as "gradient for variable 'x' has nan at index i" or
// "gradient for table 't' has inf at key k", or "".
std::string NonFinite(const ModelGrads& grads, const std::vector<ParamSpec>& params,
                      const std::vector<TableSpec>& tables,
                      const std::vector<std::vector<uint64_t>>& keys);

}  // namespace pstrain
