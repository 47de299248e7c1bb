// Internal to src/worker: a model's parameters on the parameter servers as one training step
// reads and writes them, dense variables through PsClient and embedding rows through
// TableClient, the two in parallel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "client/table_client.h"
#include "common/rpc.h"
#include "model/model.h"

namespace pstrain {

// Not thread-safe: one per training thread.
class ModelParameters {
 public:
  // `canceller` (not owned, may be null) ends the calls in flight once cancelled.
  ModelParameters(const std::vector<std::string>& ps_addresses, std::vector<VariableRef> variables,
                  std::vector<TableRef> tables, const Sender& sender, absl::Duration timeout,
                  CallCanceller* canceller);
  ~ModelParameters();

  // Pulls every dense variable and looks up keys[t] (distinct keys) of every table t. On success
  // in->params and in->rows point at the values, valid until the next Read. `sync`: both wait
  // for global step `min_version` and read one step; `clock` is the worker's ssp clock.
  absl::Status Read(const std::vector<std::vector<uint64_t>>& keys, uint64_t min_version,
                    int64_t clock, bool sync, ModelInputs* in);
  // The smallest version the last Read returned (the global step in sync mode).
  uint64_t step() const;
  // Pushes the gradients of the keys of the last Read. `sync`: every PS hears from this worker
  // for every table, so the step can complete. *stale_dropped counts the parts a PS dropped.
  // `tag` (may be null): the batch of the task the gradients come from, on every request.
  absl::Status Write(const std::vector<std::vector<uint64_t>>& keys, const ModelGrads& grads,
                     bool sync, int* stale_dropped, const PushTag* tag = nullptr);
  // Tells every PS this worker is done, or with `pause` that it waits (until its next push).
  absl::Status Leave(bool pause = false);

 private:
  class SideThread;
  PsClient dense_;
  std::unique_ptr<TableClient> tables_;  // null for a model without tables
  std::unique_ptr<SideThread> side_;     // with tables: runs their calls next to the dense ones
  std::vector<const float*> values_;
  std::vector<std::vector<float>> rows_;
};

// The first non-finite value of `grads`, as "gradient for variable 'x' has nan at index i" or
// "gradient for table 't' has inf at key k", or "".
std::string NonFinite(const ModelGrads& grads, const std::vector<ParamSpec>& params,
                      const std::vector<TableSpec>& tables,
                      const std::vector<std::vector<uint64_t>>& keys);

}  // namespace pstrain
