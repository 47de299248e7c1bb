// The C++ side of bench/python_bench.py: Pull + Push steps through the client API, timed, on
// command, so the benchmark can interleave them with the same steps taken from Python in one
// run against one cluster.
//
//   client_loop NAME:D0xD1 NAME:D0 ...   (TF_CONFIG names the cluster and this worker task)
//
// creates (gets) the variables in that order, then reads commands from stdin, one per line:
//   run K COPY   K steps of Pull, (COPY=1: copy every pulled value into this program's own
//                parameter buffers, as pstrain.torch's pull() does), Push of this program's
//                gradient buffers (zeros, as views); answers "ns_per_step N" (the mean)
//   done         calls Done() and exits 0
// Errors go to stderr with exit code 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "client_loop: error: %s\n", what.c_str());
  std::exit(1);
}

void Check(const absl::Status& s, const std::string& call) {
  if (!s.ok()) Fail(call + ": " + s.ToString());
}

// "fc.weight:256x784" -> name and shape ("b:" with nothing after the colon is a scalar).
pstrain::VariableOptions ParseVariable(const std::string& arg) {
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0) Fail("\"" + arg + "\" is not NAME:D0xD1...");
  pstrain::VariableOptions v;
  v.name = arg.substr(0, colon);
  std::stringstream dims(arg.substr(colon + 1));
  for (std::string d; std::getline(dims, d, 'x');) {
    char* end = nullptr;
    const long long n = std::strtoll(d.c_str(), &end, 10);
    if (d.empty() || *end != '\0' || n < 0) Fail("bad dimension \"" + d + "\" in " + arg);
    v.shape.push_back(n);
  }
  v.optimizer = pstrain::OptimizerOptions{.name = "sgd", .learning_rate = 1e-6};
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Fail("usage: client_loop NAME:D0xD1 ... (commands on stdin)");
  absl::StatusOr<pstrain::ClientOptions> options = pstrain::ClientOptions::FromTfConfig();
  if (!options.ok()) Fail("TF_CONFIG: " + options.status().ToString());
  absl::StatusOr<std::unique_ptr<pstrain::Client>> client = pstrain::Client::Connect(*options);
  if (!client.ok()) Fail("Connect: " + client.status().ToString());
  pstrain::Client& c = **client;

  std::vector<std::vector<float>> params, grads;
  std::vector<pstrain::TensorView> views;
  for (int i = 1; i < argc; ++i) {
    const pstrain::VariableOptions v = ParseVariable(argv[i]);
    absl::StatusOr<int> index = c.CreateVariable(v);
    Check(index.status(), "CreateVariable " + v.name);
    params.emplace_back(pstrain::NumElements(v.shape));
    grads.emplace_back(pstrain::NumElements(v.shape), 0.0f);
    views.push_back({v.shape, grads.back().data()});
  }

  std::vector<const float*> values;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "done") break;
    long long steps = 0;
    int copy = 0;
    if (command != "run" || !(in >> steps >> copy) || steps < 1) Fail("bad command: " + line);
    const auto start = std::chrono::steady_clock::now();
    for (long long s = 0; s < steps; ++s) {
      Check(c.Pull(&values), "Pull");
      if (copy) {
        for (size_t i = 0; i < params.size(); ++i) {
          std::memcpy(params[i].data(), values[i], params[i].size() * sizeof(float));
        }
      }
      Check(c.Push(views), "Push");
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    std::printf("ns_per_step %.0f\n", took.count() / static_cast<double>(steps));
    std::fflush(stdout);
  }
  Check(c.Done(), "Done");
  return 0;
}
