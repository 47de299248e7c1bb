// Internal to src/ps: one variable (or shard) held by a parameter server.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ps/consistency.h"
#include "ps/optimizer.h"
#include "ps/task_watermarks.h"

namespace pstrain {

// Shared by the server's map and the requests that use it, so a delete while a pull waits or a
// push applies leaves those requests a valid (removed) variable.
struct Variable {
  Variable(std::vector<int64_t> s, std::vector<float> v, std::unique_ptr<Optimizer> opt)
      : shape(std::move(s)),
        bytes(static_cast<int64_t>(v.size() * sizeof(float))),
        values(std::make_shared<std::vector<float>>(std::move(v))),
        optimizer(std::move(opt)) {}

  const std::vector<int64_t> shape;  // fixed at creation; read without the lock
  const int64_t bytes;               // of its values, at most kMaxTensorBytes
  absl::Mutex mu;
  // Shared with the pulls still sending them (DataHandler::PullSink's `keep`), so a pull sends
  // from the variable without a copy of its own; an update while one does writes a copy
  // (MutableValues), which the pull's values never see.
  std::shared_ptr<std::vector<float>> values ABSL_GUARDED_BY(mu);
  // The values to update in place: copied first if a pull still holds them.
  float* MutableValues() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (values.use_count() > 1) values = std::make_shared<std::vector<float>>(*values);
    return values->data();
  }
  std::unique_ptr<Optimizer> optimizer ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 0;  // number of updates applied: the global step
  bool deleted ABSL_GUARDED_BY(mu) = false;  // removed from the server's map
  // sync mode: the gradients accumulated for step `version`, how many (`added`), and who sent
  // them (`contributors`, a duplicate push included: it counts towards the step, adding nothing)
  std::vector<float> accum ABSL_GUARDED_BY(mu);
  int added ABSL_GUARDED_BY(mu) = 0;
  Contributors contributors ABSL_GUARDED_BY(mu);
  TaskWatermarks applied ABSL_GUARDED_BY(mu);  // of the updates in `values`
};

using VariablePtr = std::shared_ptr<Variable>;

// Index of the first NaN or Inf in p[0, n), or -1.
int64_t FirstNonFinite(const float* p, int64_t n);

}  // namespace pstrain
