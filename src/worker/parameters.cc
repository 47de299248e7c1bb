#include "worker/parameters.h"

#include <cmath>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

namespace {

// The margin past a call's own deadline (the rpc timeout) that a wait for it allows for its
// scheduling.
constexpr absl::Duration kWaitMargin = absl::Seconds(10);

// The status of `call`, waited for until it returned, past any deadline: it refers to the
// caller's data.
absl::Status WaitReturned(CallThread::Call& call, absl::Duration timeout) {
  absl::Status s = call.Wait(absl::Now() + timeout + kWaitMargin);
  while (!call.done()) s = call.Wait(absl::Now() + timeout + kWaitMargin);
  return s;
}

// Runs `here` on this thread and `there` on `side` at the same time; the first error wins.
absl::Status Both(CallThread* side, absl::Duration timeout,
                  const std::function<absl::Status()>& here,
                  const std::function<absl::Status()>& there) {
  std::shared_ptr<CallThread::Call> call = side->Start(there);
  absl::Status s = here();
  absl::Status t = WaitReturned(*call, timeout);
  return s.ok() ? t : s;
}

}  // namespace

ModelParameters::ModelParameters(const std::vector<std::string>& ps_addresses,
                                 std::vector<VariableRef> variables, std::vector<TableRef> tables,
                                 const Sender& sender, absl::Duration timeout,
                                 CallCanceller* canceller)
    : timeout_(timeout) {
  for (std::unique_ptr<PsClient>& d : dense_) {
    d = std::make_unique<PsClient>(ps_addresses, variables, sender, timeout);
    if (canceller != nullptr) d->set_canceller(canceller);
  }
  if (!tables.empty()) {
    tables_ = std::make_unique<TableClient>(ps_addresses, std::move(tables), sender, timeout);
    if (canceller != nullptr) tables_->set_canceller(canceller);
  }
}

void ModelParameters::set_push_dtype(DataType dtype) {
  for (std::unique_ptr<PsClient>& d : dense_) d->set_push_dtype(dtype);
}

void ModelParameters::Prefetch(int64_t clock) {
  if (prefetch_ != nullptr) return;
  const int next = 1 - current_;
  prefetch_ = side_[next].Start(
      [this, next, clock] { return dense_[next]->Pull(&values_[next], 0, clock); });
}

absl::Status ModelParameters::DropPrefetch() {
  if (prefetch_ == nullptr) return absl::OkStatus();
  // The pull has the rpc timeout as its deadline; this margin only covers its scheduling.
  absl::Status s = prefetch_->Wait(absl::Now() + timeout_ + kWaitMargin);
  if (!absl::IsDeadlineExceeded(s) || prefetch_->done()) prefetch_ = nullptr;
  return s;
}

absl::Status ModelParameters::Read(const std::vector<std::vector<uint64_t>>& keys,
                                   uint64_t min_version, int64_t clock, bool sync,
                                   ModelInputs* in) {
  absl::Status s;
  auto lookup = [&] { return tables_->Lookup(keys, &rows_, min_version, clock); };
  if (prefetch_ != nullptr) {  // the dense pull is in flight: look up meanwhile
    s = tables_ == nullptr ? absl::OkStatus() : lookup();
    absl::Status p = DropPrefetch();
    if (prefetch_ != nullptr) return p;  // still in flight past its deadline
    current_ = 1 - current_;
    if (s.ok()) s = p;
  } else {
    PsClient& dense = *dense_[current_];
    auto pull = [&] { return dense.Pull(&values_[current_], min_version, clock, sync); };
    s = tables_ == nullptr ? pull() : Both(&side_[0], timeout_, pull, lookup);
  }
  if (!s.ok()) return s;
  in->params = values_[current_];
  in->rows.clear();
  if (tables_ != nullptr) {
    for (const std::vector<float>& r : rows_) in->rows.push_back(r.data());
  }
  return absl::OkStatus();
}

uint64_t ModelParameters::step() const {
  const uint64_t dense = dense_[current_]->min_version_read();
  return tables_ == nullptr ? dense : std::min(dense, tables_->min_version_read());
}

absl::Status ModelParameters::Write(const std::vector<std::vector<uint64_t>>& keys,
                                    const ModelGrads& grads, bool sync, int* stale_dropped,
                                    const PushTag* tag) {
  int dense_dropped = 0, table_dropped = 0;
  // dense_[current_] holds the versions the gradients were computed from; a prefetch in flight
  // runs on the other client.
  auto push = [&] { return dense_[current_]->Push(grads.params, &dense_dropped, tag); };
  absl::Status s = tables_ == nullptr ? push() : Both(&side_[current_], timeout_, push, [&] {
    return tables_->Push(keys, grads.rows, /*every_ps=*/sync, &table_dropped, tag);
  });
  *stale_dropped = dense_dropped + table_dropped;
  return s;
}

void ModelParameters::PushSome(const std::vector<int>& vars, const std::vector<Tensor>& grads,
                               const PushTag* tag) {
  PsClient* dense = dense_[current_].get();
  std::optional<PushTag> copy;
  if (tag != nullptr) copy = *tag;
  pushes_.push_back(side_[current_].Start([this, dense, vars, &grads, copy] {
    int dropped = 0;
    absl::Status s = dense->PushSome(vars, grads, &dropped, copy ? &*copy : nullptr);
    pushes_dropped_ += dropped;
    return s;
  }));
}

absl::Status ModelParameters::FinishPush(int* stale_dropped) {
  absl::Status s;
  for (const std::shared_ptr<CallThread::Call>& call : pushes_) {
    absl::Status t = WaitReturned(*call, timeout_);
    if (s.ok()) s = t;
  }
  pushes_.clear();
  *stale_dropped = pushes_dropped_;
  pushes_dropped_ = 0;
  return s;
}

ModelParameters::~ModelParameters() = default;

absl::Status ModelParameters::Leave(bool pause) {
  // A pull in flight would otherwise race this client's Leave on the PS (and its values would
  // be read at the clock this worker had before pausing).
  if (absl::Status s = DropPrefetch(); !s.ok() && prefetch_ != nullptr) return s;
  return dense_[current_]->Leave(pause);
}

std::string NonFinite(const ModelGrads& grads, const std::vector<ParamSpec>& params,
                      const std::vector<TableSpec>& tables,
                      const std::vector<std::vector<uint64_t>>& keys) {
  for (size_t i = 0; i < grads.params.size(); ++i) {
    const Tensor& g = grads.params[i];
    for (int64_t j = 0; j < g.size(); ++j) {
      if (!std::isfinite(g.values[j])) {
        return absl::StrCat("gradient for variable '", params[i].name, "' has ", g.values[j],
                            " at index ", j);
      }
    }
  }
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
