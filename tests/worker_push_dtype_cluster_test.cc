// `--push_dtype float16|bfloat16` end to end: the MNIST MLP trained by a 1 PS + 1 worker job
// (real processes, `pstrain launch`) with 16-bit gradient pushes reaches the test accuracy of
// the same job, same seed, with float32 pushes, within 0.005. Sync mode with one worker makes
// a job deterministic, so the runs differ only by the rounding of the gradients on the wire.
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using namespace pstrain::testing;

nlohmann::json Launch(const std::string& push_dtype) {
  const std::vector<std::string> argv = {
      PSTRAIN_BINARY, "launch", "--data",       MnistDir(), "--ps",    "1",  "--workers", "1",
      "--mode",       "sync",   "--hidden",     "256,128",  "--batch", "64", "--epochs",  "1",
      "--seed",       "5",      "--push_dtype", push_dtype};
  const Result r = testing::Run(argv, {}, 600);
  EXPECT_EQ(r.exit_code, 0) << push_dtype << ": " << r.err;
  const std::string line = LastJsonLine(r.out);
  if (line.empty()) return nlohmann::json::object();
  return nlohmann::json::parse(line);
}

TEST(PushDtypeClusterTest, SixteenBitPushesTrainMnistAsWellAsFloat32) {
  if (!std::filesystem::exists(MnistDir() + "/train-images-idx3-ubyte")) {
    GTEST_FAIL() << "MNIST is missing under " << MnistDir() << ": run scripts/setup.sh";
  }
  const nlohmann::json f32 = Launch("float32");
  const double base = f32.value("test_accuracy", 0.0);
  ASSERT_GT(base, 0.9) << f32.dump();  // the reference itself trained
  for (const char* dtype : {"float16", "bfloat16"}) {
    const nlohmann::json j = Launch(dtype);
    const double acc = j.value("test_accuracy", 0.0);
    EXPECT_NEAR(acc, base, 0.005) << dtype << ": " << j.dump() << " against " << f32.dump();
    EXPECT_EQ(j.value("stale_dropped", -1), 0) << dtype;
    // A deterministic job whose loss and accuracy are exactly float32's pushed float32: the
    // PS never saw a 16-bit gradient (example_async_test checks the rounding itself).
    EXPECT_FALSE(j.value("final_loss", 0.0) == f32.value("final_loss", 0.0) && acc == base)
        << dtype << " trained exactly as float32 did: the gradients did not travel as " << dtype
        << " (" << j.dump() << ")";
  }
}

TEST(PushDtypeClusterTest, AnUnknownPushDtypeIsRefused) {
  const Result r = testing::Run({PSTRAIN_BINARY, "launch", "--data", MnistDir(), "--ps", "1",
                                 "--workers", "1", "--push_dtype", "float8"},
                                {}, 120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--push_dtype"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("float8"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pstrain
