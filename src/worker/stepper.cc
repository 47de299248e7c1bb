#include "worker/stepper.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "worker/step_push.h"

namespace pstrain {

Stepper::Stepper(const TrainingSpec& spec, const Examples& data, const TrainerOptions& options)
    : spec_(spec),
      data_(data),
      options_(options),
      sync_(spec.mode() == "sync"),
      ssp_(spec.mode() == "ssp"),
      steps_per_epoch_((data.size() + spec.batch_size() - 1) / spec.batch_size()),
      model_(*Model::Create(ModelConfigOf(spec.model()))) {
  const int num_ps = static_cast<int>(options.ps_addresses.size());
  absl::StatusOr<std::vector<VariableRef>> vars = VariablesOf(spec, *model_, num_ps);
  absl::StatusOr<std::vector<TableRef>> tables = TablesOf(spec, *model_);
  SessionOptions session;
  session.ps_addresses = options.ps_addresses;
  session.sender = options.sender;
  session.timeout = absl::Seconds(spec.rpc_timeout_s());
  session.canceller = options.cancel;
  session.push_dtype = spec.push_dtype() == DT_INVALID ? DT_FLOAT : spec.push_dtype();
  params_ =
      std::make_unique<ParameterSession>(std::move(session), *std::move(vars), *std::move(tables));
  *report_.mutable_sender() = options.sender;
  batch_.dense_dim = data.dense_dim;
  if (!sync_ && spec.pipeline_push()) {
    spdlog::info(model_->tables().empty()
                     ? "push pipeline: layers' gradients are pushed (in buckets of at least 1 MB) "
                       "as the backward pass completes them"
                     : "no push pipeline for a model with tables: its gradients are pushed after "
                       "the backward pass");
  }
}

Stepper::~Stepper() = default;

absl::Status Stepper::UntilRestored(const std::function<absl::Status()>& call) {
  absl::Status s = call();
  if (options_.sender.generation() == 0) return s;
  const absl::Time end = absl::Now() + absl::Seconds(spec_.rpc_timeout_s());
  for (absl::Duration backoff = absl::Milliseconds(50);
       absl::IsNotFound(s) && !stopped() && absl::Now() + backoff < end;
       backoff = std::min(2 * backoff, absl::Seconds(1))) {
    absl::SleepFor(backoff);
    s = call();
  }
  return s;
}

bool Stepper::Send() {
  report_.set_loss(loss_count_ > 0 ? loss_sum_ / loss_count_ : report_.loss());
  loss_sum_ = 0;
  loss_count_ = 0;
  return options_.report(report_);
}

void Stepper::Fail(const absl::Status& s) {
  if (stopped()) return;  // stopped from outside: the chief knows
  if (OtherGeneration(s)) {
    spdlog::info("the run of generation {} ends: {}", options_.sender.generation(),
                 std::string(s.message()));
    return;
  }
  report_.set_error(std::string(s.message()));
  Send();
}

void Stepper::Finish() {
  if (absl::Status s = params_->Leave(); !s.ok()) return Fail(s);
  report_.set_done(true);
  Send();
}

Stepper::Outcome Stepper::Step(const std::vector<int64_t>& order, size_t at, int epoch,
                               const PushTag* tag) {
  if (stopped()) return Outcome::kStop;
  const int64_t rows = std::min<int64_t>(spec_.batch_size(), order.size() - at);
  batch_.Clear();
  for (int64_t r = 0; r < rows; ++r) batch_.AppendRow(data_, order[at + r]);
  const std::vector<std::vector<uint64_t>>& keys = model_->TouchedKeys(batch_);
  absl::Status s = UntilRestored([&] {
    const ReadAt at{sync_ ? next_step_ : 0, ssp_ ? report_.steps() : 0, sync_};
    return params_->Read(keys, at, &inputs_.params, &inputs_.rows);
  });
  if (!s.ok()) {
    Fail(s);
    return Outcome::kStop;
  }
  // Async and ssp with overlap_pull: the next step's dense pull travels while this one computes
  // and pushes (at the clock this worker will have then). Its values miss this step's
  // gradients, so every step's gradients are one step staler than without the overlap (in ssp,
  // one step beyond the staleness bound). Sync steps must read the step this push completes:
  // no overlap.
  if (!sync_ && spec_.overlap_pull()) params_->Prefetch(ssp_ ? report_.steps() + 1 : 0);
  const uint64_t step = params_->step();
  const bool queue = spec_.task_queue();
  if (sync_ && !queue && static_cast<int64_t>(step) >= spec_.total_steps()) {
    return Outcome::kReachedTotal;
  }
  report_.set_epoch(sync_ && !queue ? static_cast<int>(step / steps_per_epoch_) : epoch);
  if (spec_.step_delay_ms() > 0) {  // a straggler: slow between reading and pushing
    std::this_thread::sleep_for(std::chrono::milliseconds(spec_.step_delay_ms()));
  }
  // Async and ssp with pipeline_push: each layer's gradients are pushed as the backward pass
  // completes them. The PS's ssp clock moves with pulls only, so several pushes per step to one
  // PS leave it right; a sync step counts one push per worker and variable, whole: no pipeline.
  StepPushOptions how;
  how.sync = sync_;
  how.pipeline = !sync_ && spec_.pipeline_push();
  how.bucket_bytes = spec_.push_bucket_bytes();
  how.tag = tag;
  how.retry = [this](const std::function<absl::Status()>& call) { return UntilRestored(call); };
  const StepPushResult r = ComputeAndPush(*model_, inputs_, batch_, keys, &grads_, *params_, how);
  loss_sum_ += r.loss;
  ++loss_count_;
  if (!r.status.ok()) {
    Fail(r.status);
    return Outcome::kStop;
  }
  if (!r.nonfinite.empty()) {
    std::string bad = absl::StrCat("step ", report_.steps(), ": ", r.nonfinite);
    if (!r.pushed_before.empty()) {
      absl::StrAppend(&bad, " (after the push of ", absl::StrJoin(r.pushed_before, ", "),
                      ", which the PS applied: the model reported them ready early)");
    }
    if (spec_.stop_on_nonfinite()) {
      Fail(absl::InvalidArgumentError(bad));
      return Outcome::kStop;
    }
    const int64_t skipped = report_.nonfinite_skipped() + 1;
    if (!r.pushed_before.empty()) {
      spdlog::error("{}; the rest of the step is skipped", bad);
    } else if (skipped == 1 || skipped % 100 == 0) {  // a diverging run skips every step
      spdlog::warn("{}; the step is skipped, nothing of it pushed ({} skipped so far)", bad,
                   skipped);
    }
    report_.set_nonfinite_skipped(skipped);
  }
  if (r.stale_dropped > 0) report_.set_stale_dropped(report_.stale_dropped() + 1);
  next_step_ = step + 1;
  report_.set_steps(report_.steps() + 1);
  report_.set_examples(report_.examples() + rows);
  if (report_.steps() % spec_.report_every() == 0 && !Send()) return Outcome::kStop;
  return Outcome::kNext;
}

}  // namespace pstrain
