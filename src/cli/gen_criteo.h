// `pstrain gen-criteo`: writes a synthetic click log in the Criteo TSV layout (data/data.h's
// GenerateCriteo) and prints what the best possible model would score on it.
#pragma once

#include "CLI/CLI.hpp"
#include "data/data.h"

namespace pstrain {

class GenCriteoCommand {
 public:
  // Adds the subcommand and its flags to `app`.
  explicit GenCriteoCommand(CLI::App* app);
  bool chosen() const { return cmd_->parsed(); }
  CLI::App* app() const { return cmd_; }
  // Writes the file and prints one JSON line (rows, click rate, the ground truth's AUC and log
  // loss, the path) on stdout; errors go to stderr. Returns the exit code.
  int Run() const;

 private:
  CLI::App* cmd_;
  CriteoGenOptions options_;
  std::string out_;
};

}  // namespace pstrain
