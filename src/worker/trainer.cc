#include "worker/trainer.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "model/model.h"
#include "worker/ps_client.h"

namespace pstrain {

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
  for (int i = 0; i < spec.placement_size(); ++i) {
    const Placement& p = spec.placement(i);
    if (p.variable() != model.params()[i].name) {
      return bad("placement[", i, "] is \"", p.variable(), "\", expected \"",
                 model.params()[i].name, "\"");
    }
    if (p.ps_task() < 0 || p.ps_task() >= num_ps) {
      return bad("variable ", p.variable(), " is placed on ps:", p.ps_task(), ", but there are ",
                 num_ps, " ps tasks");
    }
  }
  return absl::OkStatus();
}

void Train(const TrainingSpec& spec, const Dataset& data, const TrainerOptions& options) {
  Mlp model(std::vector<int>(spec.layers().begin(), spec.layers().end()));
  std::vector<PsClient::Variable> vars;
  for (int i = 0; i < spec.placement_size(); ++i) {
    vars.push_back({model.params()[i].name, model.params()[i].shape, spec.placement(i).ps_task()});
  }
  PsClient ps(options.ps_addresses, std::move(vars), MakeSender("worker", options.task),
              absl::Seconds(spec.rpc_timeout_s()));

  const int64_t n = data.size();
  const int64_t begin = n * spec.shard_index() / spec.num_shards();
  const int64_t end = n * (spec.shard_index() + 1) / spec.num_shards();
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

  Matrix x;
  std::vector<int32_t> labels;
  std::vector<const float*> values;
  std::vector<Tensor> grads;
  for (int epoch = 0; epoch < spec.epochs(); ++epoch) {
    report.set_epoch(epoch);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t at = 0; at < order.size(); at += spec.batch_size()) {
      if (options.stop->load()) return;
      const int64_t rows = std::min<int64_t>(spec.batch_size(), order.size() - at);
      x.resize(rows, data.features());
      labels.resize(rows);
      for (int64_t r = 0; r < rows; ++r) {
        x.row(r) = data.images.row(order[at + r]);
        labels[r] = data.labels[order[at + r]];
      }
      absl::Status s = ps.Pull(&values);
      if (s.ok()) {
        loss_sum += model.ForwardBackward(values, x, labels.data(), &grads);
        ++loss_count;
        s = ps.Push(grads);
      }
      if (!s.ok()) {
        report.set_error(std::string(s.message()));
        send();
        return;
      }
      report.set_steps(report.steps() + 1);
      report.set_examples(report.examples() + rows);
      if (report.steps() % spec.report_every() == 0 && !send()) return;
    }
  }
  report.set_done(true);
  send();
}

}  // namespace pstrain
