// `pstrain infer-schema`: reads a CSV file with a header in one pass and prints a schema of
// feature columns for it (features/features.h's SchemaInferrer) that the user can keep and edit,
// with the reason for each column's kind.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace pstrain {

class InferSchemaCommand {
 public:
  // Adds the subcommand and its flags to `app`.
  explicit InferSchemaCommand(CLI::App* app);
  bool chosen() const { return cmd_->parsed(); }
  CLI::App* app() const { return cmd_; }
  // Prints the schema (JSON) on stdout, or writes it to --out, and the reasons on stderr, one
  // "# column: why" line each; errors go to stderr. Returns the exit code.
  int Run() const;

 private:
  CLI::App* cmd_;
  std::string data_;
  std::string label_;
  std::string out_;
  char delimiter_ = ',';
};

}  // namespace pstrain
