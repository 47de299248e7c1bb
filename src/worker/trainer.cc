#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "common/rpc.h"
#include "model/model.h"

namespace pstrain {

namespace {

// The model's variables with their shards, as the chief placed them, in the model's order.
absl::StatusOr<std::vector<VariableRef>> VariablesOf(const TrainingSpec& spec, const Mlp& model,
                                                     int num_ps) {
  std::vector<VariableRef> vars;
  for (int i = 0; i < spec.placement_size(); ++i) {
    absl::StatusOr<VariableRef> v =
        ToVariableRef(spec.placement(i), model.params()[i].name, model.params()[i].shape, num_ps);
    if (!v.ok()) return v.status();
    vars.push_back(*std::move(v));
  }
  return vars;
}

}  // namespace

absl::Status ValidateSpec(const TrainingSpec& spec, int num_ps, const Dataset& data) {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (spec.layers_size() < 2) return bad("training spec needs at least 2 layer widths");
  for (int w : spec.layers()) {
    if (w <= 0) return bad("layer width ", w, " must be positive");
  }
  if (spec.layers(0) != data.features()) {
    return bad("model input width ", spec.layers(0), " does not match the data's ", data.features(),
               " features");
  }
  if (spec.layers(spec.layers_size() - 1) != data.num_classes) {
    return bad("model output width ", spec.layers(spec.layers_size() - 1), " does not match the ",
               data.num_classes, " classes of the data");
  }
  if (spec.num_shards() < 1 || spec.shard_index() < 0 || spec.shard_index() >= spec.num_shards()) {
    return bad("shard ", spec.shard_index(), " of ", spec.num_shards(), " does not exist");
  }
  if (spec.batch_size() < 1) return bad("batch size must be at least 1");
  if (spec.epochs() < 1) return bad("epochs must be at least 1");
  if (spec.report_every() < 1) return bad("report_every must be at least 1");
  if (spec.rpc_timeout_s() <= 0) return bad("rpc timeout must be positive");
  Mlp model(std::vector<int>(spec.layers().begin(), spec.layers().end()));
  if (spec.placement_size() != static_cast<int>(model.params().size())) {
    return bad("placement has ", spec.placement_size(), " variables, the model has ",
               model.params().size());
  }
  if (absl::StatusOr<std::vector<VariableRef>> vars = VariablesOf(spec, model, num_ps);
      !vars.ok()) {
    return vars.status();
  }
  if (spec.mode() != "async" && spec.mode() != "sync" && spec.mode() != "ssp") {
    return bad("unknown mode \"", spec.mode(), "\" (known: async, sync, ssp)");
  }
  if (spec.mode() == "sync" && spec.total_steps() < 1) {
    return bad("sync mode needs the job's total_steps");
  }
  return absl::OkStatus();
}

// The first non-finite gradient value, as "variable 'x' has nan at index i", or "".
std::string NonFinite(const std::vector<Tensor>& grads, const std::vector<VariableRef>& vars) {
  for (size_t i = 0; i < grads.size(); ++i) {
    for (int64_t j = 0; j < grads[i].size(); ++j) {
      if (!std::isfinite(grads[i].values[j])) {
        return absl::StrCat("gradient for variable '", vars[i].name, "' has ", grads[i].values[j],
                            " at index ", j);
      }
    }
  }
  return "";
}

void Train(const TrainingSpec& spec, const Dataset& data, const TrainerOptions& options) {
  Mlp model(std::vector<int>(spec.layers().begin(), spec.layers().end()));
  // ValidateSpec accepted the placement.
  const std::vector<VariableRef> vars =
      *VariablesOf(spec, model, static_cast<int>(options.ps_addresses.size()));
  PsClient ps(options.ps_addresses, vars, MakeSender("worker", options.task),
              absl::Seconds(spec.rpc_timeout_s()));
  ps.set_canceller(options.cancel);
  const bool sync = spec.mode() == "sync";
  const bool ssp = spec.mode() == "ssp";

  const int64_t n = data.size();
  const int64_t begin = n * spec.shard_index() / spec.num_shards();
  const int64_t end = n * (spec.shard_index() + 1) / spec.num_shards();
  const int64_t steps_per_epoch = (end - begin + spec.batch_size() - 1) / spec.batch_size();
  std::vector<int64_t> order(end - begin);
  std::iota(order.begin(), order.end(), begin);
  std::mt19937_64 rng(spec.seed());

  ProgressRequest report;
  *report.mutable_sender() = MakeSender("worker", options.task);
  double loss_sum = 0;
  int loss_count = 0;
  auto send = [&]() {
    report.set_loss(loss_count > 0 ? loss_sum / loss_count : report.loss());
    loss_sum = 0;
    loss_count = 0;
    return options.report(report);
  };
  auto fail = [&](const std::string& error) {
    if (options.stop->load()) return;  // stopped from outside: the chief knows
    report.set_error(error);
    send();
  };

  Matrix x;
  std::vector<int32_t> labels;
  std::vector<const float*> values;
  std::vector<Tensor> grads;
  uint64_t next_step = 0;  // sync: the global step this worker waits for
  // Async and ssp: `epochs` passes over the shard. Sync: passes until the global step reaches
  // total_steps, since dropped (stale) gradients do not count towards it.
  bool reached_total = false;
  for (int pass = 0; !reached_total && (sync || pass < spec.epochs()); ++pass) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t at = 0; !reached_total && at < order.size(); at += spec.batch_size()) {
      if (options.stop->load()) return;
      const int64_t rows = std::min<int64_t>(spec.batch_size(), order.size() - at);
      x.resize(rows, data.features());
      labels.resize(rows);
      for (int64_t r = 0; r < rows; ++r) {
        x.row(r) = data.images.row(order[at + r]);
        labels[r] = data.labels[order[at + r]];
      }
      absl::Status s = ps.Pull(&values, sync ? next_step : 0, ssp ? report.steps() : 0, sync);
      if (!s.ok()) return fail(std::string(s.message()));
      const uint64_t step = ps.min_version_read();
      if (sync && static_cast<int64_t>(step) >= spec.total_steps()) {
        reached_total = true;
        break;
      }
      report.set_epoch(sync ? static_cast<int>(step / steps_per_epoch) : pass);
      if (spec.step_delay_ms() > 0) {  // a straggler: slow between reading and pushing
        std::this_thread::sleep_for(std::chrono::milliseconds(spec.step_delay_ms()));
      }
      loss_sum += model.ForwardBackward(values, x, labels.data(), &grads);
      ++loss_count;
      if (std::string bad = NonFinite(grads, vars); !bad.empty()) {
        if (spec.stop_on_nonfinite()) return fail(absl::StrCat("step ", report.steps(), ": ", bad));
        report.set_nonfinite_skipped(report.nonfinite_skipped() + 1);
      } else {
        int dropped = 0;
        s = ps.Push(grads, &dropped);
        if (!s.ok()) return fail(std::string(s.message()));
        if (dropped > 0) report.set_stale_dropped(report.stale_dropped() + 1);
      }
      next_step = step + 1;
      report.set_steps(report.steps() + 1);
      report.set_examples(report.examples() + rows);
      if (report.steps() % spec.report_every() == 0 && !send()) return;
    }
  }
  if (absl::Status s = ps.Leave(); !s.ok()) return fail(std::string(s.message()));
  report.set_done(true);
  send();
}

}  // namespace pstrain
