#include "cli/checkpoint_command.h"

#include <cstdio>

#include "absl/status/statusor.h"
#include "master/master.h"
#include "spdlog/spdlog.h"

namespace pstrain {

CheckpointCommand::CheckpointCommand(CLI::App* app)
    : cmd_(app->add_subcommand("checkpoint", "read a checkpoint outside a job")) {
  inspect_ = cmd_->add_subcommand(
      "inspect",
      "print what a checkpoint holds: its global step, task ledger, variables (shape, shards, "
      "optimizer, slots) and tables (dim, rows, optimizer)");
  inspect_
      ->add_option("path", path_,
                   "a ckpt-<step> directory, or a --checkpoint_dir whose newest valid "
                   "checkpoint is read")
      ->required();
  inspect_->add_flag("--json", json_, "one JSON object instead of tables");
  cmd_->require_subcommand(1);
}

int CheckpointCommand::Run() const {
  spdlog::set_level(spdlog::level::warn);  // a checkpoint passed over is a warning; the rest noise
  absl::StatusOr<std::string> text = InspectCheckpoint(path_, json_);
  if (!text.ok()) {
    std::fprintf(stderr, "pstrain checkpoint inspect: error: %s\n",
                 std::string(text.status().message()).c_str());
    return 1;
  }
  std::fputs(text->c_str(), stdout);
  return 0;
}

}  // namespace pstrain
