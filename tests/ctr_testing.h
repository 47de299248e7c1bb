// Helpers of the CTR cluster tests: a generated Criteo-format file with its ceiling, and the
// result line of a job.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain::testing {

struct GeneratedCriteo {
  std::string path;
  double ground_truth_auc = 0;
};

// `pstrain gen-criteo --rows rows` into `dir`; fails the test if it fails.
inline GeneratedCriteo GenerateCriteo(const std::string& dir, int64_t rows) {
  GeneratedCriteo g;
  g.path = dir + "/criteo-" + std::to_string(rows) + ".tsv";
  Result r =
      Run({PSTRAIN_BINARY, "gen-criteo", "--rows", std::to_string(rows), "--out", g.path}, {}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string line = LastJsonLine(r.out);
  EXPECT_FALSE(line.empty()) << r.out;
  if (!line.empty()) g.ground_truth_auc = nlohmann::json::parse(line)["ground_truth_auc"];
  return g;
}

// The result line of a finished job, or an empty object (and a failure) if there is none.
inline nlohmann::json ResultOf(const Result& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string line = LastJsonLine(r.out);
  EXPECT_FALSE(line.empty()) << r.out << r.err;
  return line.empty() ? nlohmann::json::object() : nlohmann::json::parse(line);
}

// `pstrain launch` of 2 PS and 2 workers with `flags`.
inline std::vector<std::string> Launch(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {PSTRAIN_BINARY, "launch", "--ps", "2", "--workers", "2"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

}  // namespace pstrain::testing
