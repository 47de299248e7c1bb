// The worker-side pipeline end to end: the MNIST MLP of the demo trained by 2 PS + 2 workers
// (real processes, `pstrain launch`) in async mode with the next pull in flight while a step
// computes (--overlap_pull) and each layer pushed as the backward pass ends it (--pipeline_push
// --push_bucket_bytes 0) reaches the accuracy bar of the same job without either (the defaults),
// with the same counts:
// every example trained once, every task of the ledger applied once, the same steps and updates,
// no step skipped. (That the pipelined push applies what one push applies, layer by layer, is
// worker_pipeline_push_test's.)
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace pstrain::testing;

class PipelineClusterTest : public ProcessTest {
 protected:
  void SetUp() override {
    ProcessTest::SetUp();
    RequireMnist();
  }
  // The job's result; *worker_logs: what its workers logged.
  nlohmann::json Launch(const std::vector<std::string>& overlap, std::string* worker_logs) {
    const std::string logs = dir_ + "/logs-" + std::to_string(runs_++);
    std::vector<std::string> argv = {
        PSTRAIN_BINARY, "launch", "--data",   MnistDir(), "--ps",          "2",
        "--workers",    "2",      "--mode",   "async",    "--hidden",      "256,128",
        "--optimizer",  "adam",   "--lr",     "0.001",    "--lr_schedule", "cosine",
        "--batch",      "64",     "--epochs", "3",        "--log_dir",     logs,
        "--log_level",  "info"};
    argv.insert(argv.end(), overlap.begin(), overlap.end());
    const Result r = RunTagged(argv, {}, 600);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    worker_logs->clear();
    for (const char* name : {"/worker-0.log", "/worker-1.log"}) {
      std::ifstream in(logs + name);
      worker_logs->append(std::istreambuf_iterator<char>(in), {});
    }
    const std::string line = LastJsonLine(r.out);
    if (line.empty()) return nlohmann::json::object();
    return nlohmann::json::parse(line);
  }
  int runs_ = 0;
};

TEST_F(PipelineClusterTest, OverlappedAsyncTrainingReachesTheAccuracyOfThePlainOrder) {
  std::string plain_logs, piped_logs;
  const nlohmann::json plain = Launch({}, &plain_logs);
  const nlohmann::json piped =
      Launch({"--overlap_pull", "--pipeline_push", "--push_bucket_bytes", "0"}, &piped_logs);
  const std::string kPipelined = "push pipeline: layers' gradients are pushed";
  EXPECT_THAT(plain_logs, HasSubstr("worker:0 serving on"));  // the logs were read
  EXPECT_THAT(plain_logs, Not(HasSubstr(kPipelined)));
  EXPECT_THAT(piped_logs, HasSubstr(kPipelined));
  for (const nlohmann::json* j : {&plain, &piped}) {
    EXPECT_GE(j->value("test_accuracy", 0.0), 0.970) << j->dump();
    EXPECT_EQ(j->value("examples", 0), 3 * 60000) << j->dump();
    EXPECT_EQ(j->value("nonfinite_skipped", -1), 0) << j->dump();
    EXPECT_EQ(j->value("stale_dropped", -1), 0) << j->dump();
    EXPECT_EQ(j->value("duplicates_dropped", -1), 0) << j->dump();
    EXPECT_TRUE(j->value("tasks_applied_once", false)) << j->dump();
    EXPECT_EQ(j->value("tasks_applied", -1), j->value("tasks", -2)) << j->dump();
  }
  // The same batches: the same steps and, per step, one update of every shard.
  EXPECT_EQ(piped.value("steps", -1), plain.value("steps", -2));
  EXPECT_EQ(piped.value("updates_applied", -1), plain.value("updates_applied", -2));
}

}  // namespace
}  // namespace pstrain
