// Whole clusters in each consistency mode: accuracy on the real MNIST, backup workers, bounded
// staleness, sharded variables and the non-finite gradient policy, read from the chief's result.
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace pstrain::testing;

class ModesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(MnistDir() + "/train-images-idx3-ubyte")) {
      GTEST_FAIL() << "MNIST is missing under " << MnistDir() << ": run scripts/setup.sh";
    }
  }
  // Runs `pstrain launch` with `flags`; returns the chief's JSON result (or fails the test).
  nlohmann::json Launch(std::vector<std::string> flags, int* exit_code = nullptr,
                        std::string* err = nullptr, const std::string& data = MnistDir()) {
    std::vector<std::string> argv = {PSTRAIN_BINARY, "launch", "--data", data};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Result r = testing::Run(argv, {}, 600);
    if (exit_code != nullptr) *exit_code = r.exit_code;
    if (err != nullptr) *err = r.err;
    if (exit_code == nullptr) {
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    const std::string line = LastJsonLine(r.out);
    if (line.empty()) return nlohmann::json::object();
    return nlohmann::json::parse(line);
  }
};

// The MNIST MLP of the demo (256,128, Adam, batch 64, 3 epochs) in each mode, with the learning
// rate decayed by a cosine schedule over the job's global steps (by default as many as the job
// has; given explicitly for sync). Sync averages two workers'
// gradients per step, twice the batch in half the steps, so it takes twice the learning rate
// (the linear scaling rule).
TEST_F(ModesTest, AsyncSyncAndSspEachReachAccuracy) {
  struct Case {
    std::vector<std::string> flags;
    const char* mode;
  };
  const std::vector<Case> cases = {
      {{"--mode", "async", "--lr", "0.001"}, "async"},
      {{"--mode", "sync", "--lr", "0.002", "--lr_total_steps", "1407"}, "sync"},
      {{"--mode", "ssp", "--staleness", "2", "--lr", "0.001"}, "ssp"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> flags = {
        "--ps", "2",       "--workers", "2",        "--hidden", "256,128",       "--optimizer",
        "adam", "--batch", "64",        "--epochs", "3",        "--lr_schedule", "cosine"};
    flags.insert(flags.end(), c.flags.begin(), c.flags.end());
    int code = 0;
    std::string err;
    nlohmann::json j = Launch(flags, &code, &err);
    ASSERT_EQ(code, 0) << err;
    if (std::string(c.mode) != "sync") {  // the schedule's length defaults to the job's
      EXPECT_THAT(err, HasSubstr("cosine learning-rate schedule over 2814 global steps"));
    }
    EXPECT_EQ(j["mode"], c.mode);
    EXPECT_GE(j.value("test_accuracy", 0.0), 0.970) << c.mode << ": " << j.dump();
    if (std::string(c.mode) == "ssp") {
      EXPECT_LE(j["max_clock_gap"].get<int>(), 2);
    }
  }
}

// 3 workers, 2 gradients per step, worker:2 slow: the global step advances at the fast workers'
// pace and the slow worker's late gradients are dropped and counted.
TEST_F(ModesTest, BackupWorkersKeepTheFastPace) {
  nlohmann::json j = Launch({"--ps",
                             "2",
                             "--workers",
                             "3",
                             "--mode",
                             "sync",
                             "--replicas_to_aggregate",
                             "2",
                             "--slow_worker",
                             "2",
                             "--slow_worker_delay_ms",
                             "40",
                             "--hidden",
                             "32",
                             "--epochs",
                             "1",
                             "--optimizer",
                             "sgd",
                             "--lr",
                             "0.1",
                             "--task_rows",  // fixed shards: the step counts below are theirs
                             "0"});
  const std::vector<int64_t> steps = j["worker_steps"];
  const std::vector<int64_t> stale = j["worker_stale_steps"];
  ASSERT_EQ(steps.size(), 3u);
  const int64_t global_steps = (20000 + 63) / 64;  // one epoch of a 20000-example shard
  EXPECT_EQ(j["updates_applied"], global_steps * 4) << j.dump();  // 4 variables
  EXPECT_GE(std::min(steps[0], steps[1]), global_steps * 2 / 3) << j.dump();
  EXPECT_LT(steps[2], std::min(steps[0], steps[1]) / 2) << j.dump();
  EXPECT_GE(stale[2], steps[2] / 2) << j.dump();
  EXPECT_GT(j["stale_dropped"].get<int64_t>(), 0);
  EXPECT_GT(j.value("test_accuracy", 0.0), 0.85);
}

// A slow worker under ssp: the others wait for it, and no pull is ever served to a worker more
// than s clocks ahead of the slowest (the PS records the largest gap it granted).
TEST_F(ModesTest, SspBoundsTheClockGap) {
  for (int s : {0, 2}) {
    nlohmann::json j = Launch({"--ps",
                               "2",
                               "--workers",
                               "3",
                               "--mode",
                               "ssp",
                               "--staleness",
                               std::to_string(s),
                               "--slow_worker",
                               "1",
                               "--slow_worker_delay_ms",
                               "5",
                               "--hidden",
                               "32",
                               "--epochs",
                               "1",
                               "--batch",
                               "128",
                               "--task_rows",
                               "0"});
    EXPECT_LE(j["max_clock_gap"].get<int>(), s) << j.dump();
    EXPECT_GT(j["pulls_waited"].get<int>(), 0) << j.dump();
    const std::vector<int64_t> steps = j["worker_steps"];
    EXPECT_EQ(steps, std::vector<int64_t>(3, (20000 + 127) / 128));
  }
}

// Variables split into shards over 3 PS and placed greedily still train the model.
TEST_F(ModesTest, PartitionedVariablesTrain) {
  std::string err;
  int code = 0;
  nlohmann::json j = Launch({"--ps", "3", "--workers", "2", "--partitioner", "fixed:3",
                             "--placement", "greedy", "--hidden", "64", "--epochs", "1"},
                            &code, &err);
  ASSERT_EQ(code, 0) << err;
  EXPECT_GT(j.value("test_accuracy", 0.0), 0.9) << j.dump();
  EXPECT_THAT(err, HasSubstr("dense0/kernel/part_2"));
  EXPECT_THAT(err, HasSubstr("greedy by bytes"));
}

// A gradient with NaN: by default the step is skipped and counted; with --nonfinite stop the job
// ends with a message naming the variable. A learning rate of 1e30 makes the weights overflow.
// Features at the top of float's range are finite, but the first layer's sums of them are not:
// every step's gradients are non-finite. (A learning rate cannot make a run diverge any more:
// it is bounded, and the PS refuses an update that would make a value non-finite.)
TEST_F(ModesTest, NonFiniteGradientPolicy) {
  const std::string dir = TempDir();
  const std::string csv = dir + "/huge.csv";
  {
    std::ofstream out(csv);
    for (int row = 0; row < 400; ++row) {
      out << row % 2;
      for (int f = 0; f < 100; ++f) out << ",3.4e38";
      out << "\n";
    }
  }
  const std::vector<std::string> diverge = {"--ps",        "1",   "--workers", "2",
                                            "--hidden",    "16",  "--epochs",  "1",
                                            "--optimizer", "sgd", "--batch",   "32"};
  nlohmann::json j = Launch(diverge, nullptr, nullptr, "csv:" + csv);
  EXPECT_GT(j["nonfinite_skipped"].get<int64_t>(), 0) << j.dump();

  std::vector<std::string> stop = diverge;
  stop.insert(stop.end(), {"--nonfinite", "stop"});
  int code = 0;
  std::string err;
  Launch(stop, &code, &err, "csv:" + csv);
  EXPECT_EQ(code, 1);
  EXPECT_THAT(err, HasSubstr("failed: step "));
  EXPECT_THAT(err, HasSubstr("gradient for variable 'dense"));
  EXPECT_THAT(err, HasSubstr("nan"));
}

}  // namespace
}  // namespace pstrain
