// `pstrain bench`: the data plane's benchmarks (bench/README.md), each next to a baseline
// measured in the same run and reported as the ratio to it: push+pull throughput per transport
// against a raw TCP ping-pong (and memcpy) of the same bytes, the latency of a 4 KB pull, the
// PS's apply throughput per optimizer, and MNIST MLP examples/s through a cluster against the
// same model trained in one process, and the peak memory of a PS serving a large variable.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace pstrain {

class BenchCommand {
 public:
  // Adds the subcommand and its flags to `app`.
  explicit BenchCommand(CLI::App* app);
  bool chosen() const { return cmd_->parsed(); }
  CLI::App* app() const { return cmd_; }
  // Runs the benchmarks, prints their tables and writes them to --out. `self` is the path of
  // the pstrain binary (which it starts for the PS and worker processes). Returns the exit code.
  int Run(const std::string& self) const;

 private:
  CLI::App* cmd_;
  std::string out_;
  bool quick_ = false;
  std::string transports_ = "grpc,tcp,ucx";
  std::string sections_ = "transport,apply,e2e,memory";
  std::string sizes_;
  std::string data_ = "data/mnist";
  std::string python_ = "/usr/bin/python3";
  std::string torch_script_ = "bench/torch_mlp.py";
  std::string memory_baseline_;
};

}  // namespace pstrain
