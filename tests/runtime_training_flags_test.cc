// The training flags' defaults as the chief gets them: each model's own where the MNIST job's do
// not suit it, and a table's (--schema) learning rate and schedule per model; a given flag wins.
#include <algorithm>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "gtest/gtest.h"
#include "runtime/training_flags.h"

namespace pstrain {
namespace {

JobConfig Parse(std::vector<std::string> args) {
  CLI::App app("test");
  TrainingFlags flags;
  flags.AddTo(&app);
  args.insert(args.begin(), "pstrain");
  if (std::find(args.begin(), args.end(), "--schema") != args.end()) {
    args.insert(args.end(), {"--data", "csv:train.csv"});
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  absl::StatusOr<JobConfig> c = flags.ToConfig();
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : JobConfig{};
}

TEST(TrainingFlagsTest, ATablesDefaultsDependOnTheModel) {
  const JobConfig linear = Parse({"--model", "linear", "--schema", "auto"});
  EXPECT_DOUBLE_EQ(linear.optimizer.learning_rate(), 0.01);
  EXPECT_EQ(linear.optimizer.schedule().kind(), "cosine");
  EXPECT_EQ(linear.batch_size, 32);
  EXPECT_EQ(linear.epochs, kAutoEpochs);
  for (const char* deep : {"mlp", "wide_deep"}) {
    const JobConfig c = Parse({"--model", deep, "--schema", "auto"});
    EXPECT_DOUBLE_EQ(c.optimizer.learning_rate(), 0.003) << deep;
    EXPECT_EQ(c.optimizer.schedule().kind(), std::string(deep) == "mlp" ? "constant" : "cosine");
    // The chief makes an mlp's regression cosine once it knows the task.
    EXPECT_EQ(c.cosine_if_regression, std::string(deep) == "mlp") << deep;
  }
  EXPECT_FALSE(Parse({"--model", "linear", "--schema", "auto"}).cosine_if_regression);
  EXPECT_FALSE(Parse({"--model", "mlp"}).cosine_if_regression);
  for (const char* flag : {"--lr_schedule", "--min_lr", "--warmup_steps", "--lr_total_steps"}) {
    const std::string value = std::string(flag) == "--lr_schedule" ? "constant" : "0";
    EXPECT_FALSE(Parse({"--model", "mlp", "--schema", "auto", flag, value}).cosine_if_regression)
        << flag;
  }
  // Without a schema, the CTR models keep theirs: only wide_deep decays.
  EXPECT_EQ(Parse({"--model", "linear"}).optimizer.schedule().kind(), "constant");
  EXPECT_DOUBLE_EQ(Parse({"--model", "linear"}).optimizer.learning_rate(), 0.003);
  EXPECT_EQ(Parse({"--model", "wide_deep"}).optimizer.schedule().kind(), "cosine");
  // Given flags win.
  const JobConfig given = Parse({"--model", "linear", "--schema", "auto", "--lr", "0.05",
                                 "--lr_schedule", "constant", "--epochs", "3"});
  EXPECT_DOUBLE_EQ(given.optimizer.learning_rate(), 0.05);
  EXPECT_EQ(given.optimizer.schedule().kind(), "constant");
  EXPECT_EQ(given.epochs, 3);
}

}  // namespace
}  // namespace pstrain
