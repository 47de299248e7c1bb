// JobConfig validation and the JSON form of JobResult.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "master/master.h"
#include "master/placement.h"
#include "master/specs.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

absl::Status Bad(const auto&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// x to `digits` decimals (dividing by a power of ten, which JSON then prints short).
double Round(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}

}  // namespace

JobConfig::JobConfig() {
  optimizer.set_name("adam");
  optimizer.set_learning_rate(0.001);
}

absl::Status JobConfig::Validate() const {
  if (model != "mlp" && model != "external") {
    return Bad("--model: unknown model \"", model, "\" (known: mlp, external)");
  }
  for (int h : hidden) {
    if (h <= 0) return Bad("--hidden: layer width ", h, " must be positive");
  }
  if (mode != "async" && mode != "sync" && mode != "ssp") {
    return Bad("--mode: unknown mode \"", mode, "\" (known: async, sync, ssp)");
  }
  if (staleness < 0 || staleness > 1000000) {
    return Bad("--staleness ", staleness, " is out of range [0, 1000000]");
  }
  if (replicas_to_aggregate < 0) {
    return Bad("--replicas_to_aggregate ", replicas_to_aggregate, " must be non-negative");
  }
  // The mlp job sets a cosine schedule's length to its own when --lr_total_steps is not given.
  if (absl::Status s = ValidateOptimizerConfig(optimizer, FlagName, model == "mlp"); !s.ok()) return s;
  if (absl::StatusOr<PartitionerSpec> p = ParsePartitioner(partitioner); !p.ok()) {
    return Bad("--partitioner: ", p.status().message());
  }
  if (absl::StatusOr<PlacementStrategy> p = ParsePlacement(placement); !p.ok()) {
    return Bad("--placement: ", p.status().message());
  }
  if (batch_size < 1) return Bad("--batch ", batch_size, " must be at least 1");
  if (epochs < 1) return Bad("--epochs ", epochs, " must be at least 1");
  if (report_every < 1) return Bad("report_every ", report_every, " must be at least 1");
  if (slow_worker_delay_ms < 0) {
    return Bad("--slow_worker_delay_ms ", slow_worker_delay_ms, " must be non-negative");
  }
  const std::pair<const char*, absl::Duration> timeouts[] = {
      {"--connect_timeout", register_timeout},
      {"--task_timeout", task_timeout},
      {"rpc_timeout", rpc_timeout}};
  for (const auto& [flag, d] : timeouts) {
    if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
      return Bad(flag, " ", absl::FormatDuration(d), " must be positive and finite");
    }
  }
  return absl::OkStatus();
}

absl::Status JobConfig::ValidateFor(int num_ps, int num_workers) const {
  if (absl::Status s = Validate(); !s.ok()) return s;
  if (num_ps < 1 || num_ps > kMaxTasks) {
    return Bad("the cluster has ", num_ps, " ps tasks; a job needs 1 to ", kMaxTasks);
  }
  if (num_workers < 1 || num_workers > kMaxTasks) {
    return Bad("the cluster has ", num_workers, " workers; a job needs 1 to ", kMaxTasks);
  }
  if (replicas_to_aggregate > num_workers) {
    return Bad("--replicas_to_aggregate ", replicas_to_aggregate, " exceeds the ", num_workers,
               " workers");
  }
  if (slow_worker >= num_workers) {
    return Bad("--slow_worker ", slow_worker, " is not a worker (there are ", num_workers, ")");
  }
  return absl::OkStatus();
}

std::string JobResult::ToJson() const {
  nlohmann::json j = {{"mode", mode},
                      {"examples_per_sec", std::llround(examples_per_sec)},
                      {"global_step", global_step},
                      {"steps", steps},
                      {"worker_pushes", worker_pushes},
                      {"examples", examples},
                      {"seconds", Round(seconds, 1)},
                      {"final_loss", Round(final_loss, 4)},
                      {"ps", num_ps},
                      {"workers", num_workers},
                      {"worker_steps", worker_steps},
                      {"nonfinite_skipped", nonfinite_skipped},
                      {"updates_applied", ps_stats.updates_applied()},
                      {"stale_dropped", ps_stats.stale_dropped()},
                      {"nonfinite_rejected", ps_stats.nonfinite_rejected()},
                      {"max_clock_gap", ps_stats.max_clock_gap()},
                      {"pulls_waited", ps_stats.pulls_waited()},
                      {"worker_stale_steps", worker_stale_steps}};
  if (total_steps > 0) j["total_steps"] = total_steps;
  if (test_accuracy > 0) j["test_accuracy"] = Round(test_accuracy, 4);
  return j.dump();
}

}  // namespace pstrain
