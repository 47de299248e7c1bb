// `pstrain checkpoint inspect PATH [--json]`: what a checkpoint holds (global step, the task
// ledger, every variable and table), read and checked as a restore reads it, outside any job.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace pstrain {

class CheckpointCommand {
 public:
  // Adds the subcommand, its `inspect` subcommand and their flags to `app`.
  explicit CheckpointCommand(CLI::App* app);
  bool chosen() const { return cmd_->parsed(); }
  // The subcommand the user gave (for messages about its flags).
  CLI::App* app() const { return inspect_->parsed() ? inspect_ : cmd_; }
  // Prints the summary on stdout; a checkpoint that cannot be read is named with what is wrong
  // on stderr. Returns the exit code: 0, 1 for a checkpoint that cannot be read, 2 for usage.
  int Run() const;

 private:
  CLI::App* cmd_;
  CLI::App* inspect_;
  std::string path_;
  bool json_ = false;
};

}  // namespace pstrain
