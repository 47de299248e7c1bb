#include "cli/bench.h"

#include <iostream>

namespace pstrain {

BenchCommand::BenchCommand(CLI::App* app)
    : cmd_(app->add_subcommand("bench", "measure the data plane against raw TCP and memcpy")) {
  cmd_->add_option("--out", out_, "write the tables (Markdown) to this file");
}

int BenchCommand::Run(const std::string&) const {
  std::cerr << "pstrain bench: not built yet\n";
  return 1;
}

}  // namespace pstrain
