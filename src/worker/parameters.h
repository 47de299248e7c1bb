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
#include "client/call_thread.h"
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

  // The element type of the dense gradients Write pushes (PsClient::set_push_dtype).
  void set_push_dtype(DataType dtype);

  // Pulls every dense variable and looks up keys[t] (distinct keys) of every table t. On success
  // in->params and in->rows point at the values, valid until the next Read. `sync`: both wait
  // for global step `min_version` and read one step; `clock` is the worker's ssp clock. After a
  // Prefetch the dense values are those it pulled (its min_version and clock; it is waited
  // for here), and only the lookup is made now.
  absl::Status Read(const std::vector<std::vector<uint64_t>>& keys, uint64_t min_version,
                    int64_t clock, bool sync, ModelInputs* in);
  // The smallest version the last Read returned (the global step in sync mode).
  uint64_t step() const;
  // Pushes the gradients of the keys of the last Read. `sync`: every PS hears from this worker
  // for every table, so the step can complete. *stale_dropped counts the parts a PS dropped.
  // `tag` (may be null): the batch of the task the gradients come from, on every request.
  absl::Status Write(const std::vector<std::vector<uint64_t>>& keys, const ModelGrads& grads,
                     bool sync, int* stale_dropped, const PushTag* tag = nullptr);
  // A pipelined Write of the dense gradients (a model without tables; async and ssp): queues the
  // push of grads[v] for every v in `vars` (final until FinishPush returns) behind the pushes
  // queued before, on a thread of its own, and returns at once, so the caller goes on with the
  // backward pass meanwhile. Each request to a PS carries whole shards of these variables
  // (PsClient::PushSome), tagged with the versions of the last Read: pushing every variable once
  // this way applies what Write applies.
  void PushSome(const std::vector<int>& vars, const std::vector<Tensor>& grads,
                const PushTag* tag = nullptr);
  // Waits for every push PushSome queued since the last FinishPush: the first error, or OK with
  // *stale_dropped counting the shards the PS dropped.
  absl::Status FinishPush(int* stale_dropped);
  // Starts the dense pull of the next Read (async and ssp: its values then miss the gradients
  // of the Write that follows, one step staler) on a second PsClient, so that it is in flight
  // while the caller computes and pushes; the values of the last Read stay valid meanwhile, and
  // the next Write is still tagged with the versions they were read at. Ignored while a
  // prefetch is in flight.
  void Prefetch(int64_t clock);
  // Tells every PS this worker is done, or with `pause` that it waits (until its next push).
  // Waits for a prefetch in flight first, and drops it.
  absl::Status Leave(bool pause = false);

 private:
  absl::Status DropPrefetch();
  const absl::Duration timeout_;
  // Two clients of the dense variables used in turn: dense_[current_] read the values of the
  // last Read and pushes their gradients; the other takes the prefetch.
  std::unique_ptr<PsClient> dense_[2];
  int current_ = 0;
  std::unique_ptr<TableClient> tables_;  // null for a model without tables
  CallThread side_[2];                   // dense_[i]'s prefetch; side_[0] also runs table calls
  std::shared_ptr<CallThread::Call> prefetch_;  // in flight on dense_[1 - current_], or null
  // PushSome's pushes on side_[current_], and the shards they saw dropped (written there).
  std::vector<std::shared_ptr<CallThread::Call>> pushes_;
  int pushes_dropped_ = 0;
  std::vector<const float*> values_[2];
  std::vector<std::vector<float>> rows_;
};

// The first non-finite value of `grads`, as "gradient for variable 'x' has nan at index i" or
// "gradient for table 't' has inf at key k", or "".
std::string NonFinite(const ModelGrads& grads, const std::vector<ParamSpec>& params,
                      const std::vector<TableSpec>& tables,
                      const std::vector<std::vector<uint64_t>>& keys);

}  // namespace pstrain
