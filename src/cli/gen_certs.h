// `pstrain gen-certs`: a CA and one certificate valid for every host of a cluster, for the mutual
// TLS between its tasks (--tls_cert, --tls_key, --tls_ca; runtime/certs.h).
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace pstrain {

class GenCertsCommand {
 public:
  // Adds the subcommand and its flags to `app`.
  explicit GenCertsCommand(CLI::App* app);
  bool chosen() const { return cmd_->parsed(); }
  CLI::App* app() const { return cmd_; }
  // Writes the files and prints one JSON line naming them on stdout; errors go to stderr.
  // Returns the exit code.
  int Run() const;

 private:
  CLI::App* cmd_;
  std::string out_, hosts_, ca_cert_, ca_key_;
  int days_ = 365;
};

}  // namespace pstrain
