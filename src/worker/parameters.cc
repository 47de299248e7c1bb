#include "worker/parameters.h"

#include <cmath>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// One thread kept for the second call of a step (the lookup next to the pull, the sparse push
// next to the dense one), so that no thread is started per step.
class ModelParameters::SideThread {
 public:
  SideThread() : thread_([this] { Loop(); }) {}
  ~SideThread() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  // Runs `here` on this thread and `there` on the side thread at the same time; the first error
  // wins.
  absl::Status Both(const std::function<absl::Status()>& here,
                    const std::function<absl::Status()>& there) {
    {
      absl::MutexLock lock(&mu_);
      task_ = &there;
      done_ = false;
    }
    absl::Status s = here();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return s.ok() ? result_ : s;
  }

 private:
  bool Ready() const { return stop_ || task_ != nullptr; }
  void Loop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      mu_.Await(absl::Condition(this, &SideThread::Ready));
      if (stop_) return;
      const std::function<absl::Status()>* task = task_;
      task_ = nullptr;
      mu_.Unlock();
      absl::Status r = (*task)();
      mu_.Lock();
      result_ = std::move(r);
      done_ = true;
    }
  }

  absl::Mutex mu_;
  const std::function<absl::Status()>* task_ = nullptr;  // the call to run next
  bool done_ = false;                                    // it returned
  bool stop_ = false;
  absl::Status result_;
  std::thread thread_;  // last: starts once the fields above are set
};

ModelParameters::ModelParameters(const std::vector<std::string>& ps_addresses,
                                 std::vector<VariableRef> variables, std::vector<TableRef> tables,
                                 const Sender& sender, absl::Duration timeout,
                                 CallCanceller* canceller)
    : dense_(ps_addresses, std::move(variables), sender, timeout) {
  if (canceller != nullptr) dense_.set_canceller(canceller);
  if (!tables.empty()) {
    tables_ = std::make_unique<TableClient>(ps_addresses, std::move(tables), sender, timeout);
    side_ = std::make_unique<SideThread>();
    if (canceller != nullptr) tables_->set_canceller(canceller);
  }
}

absl::Status ModelParameters::Read(const std::vector<std::vector<uint64_t>>& keys,
                                   uint64_t min_version, int64_t clock, bool sync,
                                   ModelInputs* in) {
  auto pull = [&] { return dense_.Pull(&values_, min_version, clock, sync); };
  absl::Status s = tables_ == nullptr ? pull() : side_->Both(pull, [&] {
    return tables_->Lookup(keys, &rows_, min_version, clock);
  });
  if (!s.ok()) return s;
  in->params = values_;
  in->rows.clear();
  if (tables_ != nullptr) {
    for (const std::vector<float>& r : rows_) in->rows.push_back(r.data());
  }
  return absl::OkStatus();
}

uint64_t ModelParameters::step() const {
  const uint64_t dense = dense_.min_version_read();
  return tables_ == nullptr ? dense : std::min(dense, tables_->min_version_read());
}

absl::Status ModelParameters::Write(const std::vector<std::vector<uint64_t>>& keys,
                                    const ModelGrads& grads, bool sync, int* stale_dropped,
                                    const PushTag* tag) {
  int dense_dropped = 0, table_dropped = 0;
  auto push = [&] { return dense_.Push(grads.params, &dense_dropped, tag); };
  absl::Status s = tables_ == nullptr ? push() : side_->Both(push, [&] {
    return tables_->Push(keys, grads.rows, /*every_ps=*/sync, &table_dropped, tag);
  });
  *stale_dropped = dense_dropped + table_dropped;
  return s;
}

ModelParameters::~ModelParameters() = default;

absl::Status ModelParameters::Leave(bool pause) { return dense_.Leave(pause); }

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
