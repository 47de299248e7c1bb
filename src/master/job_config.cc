// JobConfig validation and the JSON form of JobResult.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "master/master.h"
#include "master/placement.h"
#include "nlohmann/json.hpp"

namespace pstrain {

JobConfig::JobConfig() {
  optimizer.set_name("adam");
  optimizer.set_learning_rate(0.001);
}

absl::Status JobConfig::Validate() const {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (model != "mlp" && model != "external") {
    return bad("unknown model \"", model, "\" (known: mlp, external)");
  }
  for (int h : hidden) {
    if (h <= 0) return bad("hidden layer width ", h, " must be positive");
  }
  if (mode != "async" && mode != "sync" && mode != "ssp") {
    return bad("unknown mode \"", mode, "\" (known: async, sync, ssp)");
  }
  if (staleness < 0 || staleness > 1000000) {
    return bad("staleness ", staleness, " is out of range [0, 1000000]");
  }
  if (replicas_to_aggregate < 0) {
    return bad("replicas_to_aggregate ", replicas_to_aggregate, " must be non-negative");
  }
  static const char* kOptimizers[] = {"sgd", "momentum", "adagrad", "adam", "rmsprop", "ftrl"};
  if (std::find(std::begin(kOptimizers), std::end(kOptimizers), optimizer.name()) ==
      std::end(kOptimizers)) {
    return bad("unknown optimizer \"", optimizer.name(),
               "\" (known: sgd, momentum, adagrad, adam, rmsprop, ftrl)");
  }
  if (!std::isfinite(optimizer.learning_rate()) || optimizer.learning_rate() <= 0) {
    return bad("learning rate ", optimizer.learning_rate(), " must be positive and finite");
  }
  if (absl::StatusOr<PartitionerSpec> p = ParsePartitioner(partitioner); !p.ok()) return p.status();
  if (absl::StatusOr<PlacementStrategy> p = ParsePlacement(placement); !p.ok()) return p.status();
  if (batch_size < 1) return bad("batch size must be at least 1");
  if (epochs < 1) return bad("epochs must be at least 1");
  if (report_every < 1) return bad("report_every must be at least 1");
  if (slow_worker_delay_ms < 0) return bad("slow_worker_delay_ms must be non-negative");
  return absl::OkStatus();
}

std::string JobResult::ToJson() const {
  nlohmann::json j = {{"mode", mode},
                      {"examples_per_sec", examples_per_sec},
                      {"steps", steps},
                      {"examples", examples},
                      {"seconds", seconds},
                      {"final_loss", final_loss},
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
  if (test_accuracy > 0) j["test_accuracy"] = test_accuracy;
  return j.dump();
}

}  // namespace pstrain
