#include "cli/gen_criteo.h"

#include <cstdio>

#include "nlohmann/json.hpp"

namespace pstrain {

GenCriteoCommand::GenCriteoCommand(CLI::App* app)
    : cmd_(app->add_subcommand("gen-criteo",
                               "write a synthetic Criteo-format click log from a known model and "
                               "print the best AUC any model can reach on it")) {
  cmd_->add_option("--rows", options_.rows, "rows to write")->required();
  cmd_->add_option("--out", out_, "the file to write (TSV)")->required();
  cmd_->add_option("--seed", options_.seed, "seed of the ground truth and the rows")
      ->capture_default_str();
  cmd_->add_option("--zipf", options_.zipf_exponent,
                   "Zipf exponent of the categorical values' frequencies")
      ->capture_default_str();
  cmd_->add_option("--missing_rate", options_.missing_rate, "chance that a field is empty")
      ->capture_default_str();
}

int GenCriteoCommand::Run() const {
  absl::StatusOr<CriteoGenResult> r = GenerateCriteo(out_, options_);
  if (!r.ok()) {
    std::fprintf(stderr, "pstrain gen-criteo: error: %s\n",
                 std::string(r.status().message()).c_str());
    return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const nlohmann::json j = {{"rows", r->rows},
                            {"path", out_},
                            {"click_rate", r->click_rate},
                            {"ground_truth_auc", r->ground_truth_auc},
                            {"ground_truth_log_loss", r->ground_truth_log_loss}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace pstrain
