// ClientOptions::FromTfConfig and the option structs' wire form.
#include <cstdlib>

#include "client/client.h"
#include "client/options_proto.h"
#include "common/initializer_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr char kCluster[] =
    R"("cluster": {"chief": ["h:1"], "ps": ["h:2", "h:3"], "worker": ["h:4", "h:5"]})";

std::string TfConfig(const std::string& task) {
  return std::string("{") + kCluster + R"(, "task": )" + task + "}";
}

TEST(ClientOptionsTest, FromTfConfigTakesTheChiefAndTheWorkerIndex) {
  absl::StatusOr<ClientOptions> o =
      ClientOptions::FromTfConfigJson(TfConfig(R"({"type": "worker", "index": 1})"));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->chief, "h:1");
  EXPECT_EQ(o->task, 1);
  EXPECT_EQ(o->timeout, ClientOptions{}.timeout);
}

TEST(ClientOptionsTest, FromTfConfigReadsTheEnvironment) {
  setenv("TF_CONFIG", TfConfig(R"({"type": "worker", "index": 0})").c_str(), 1);
  absl::StatusOr<ClientOptions> o = ClientOptions::FromTfConfig();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->chief, "h:1");
  unsetenv("TF_CONFIG");
  EXPECT_THAT(ClientOptions::FromTfConfig().status().message(), HasSubstr("TF_CONFIG is not set"));
}

TEST(ClientOptionsTest, FromTfConfigSaysWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"cluster\": ", "not valid JSON: "},
      {"{\"cluster\": {\n  \"chief\": [\"h:1\"],,\n}}", "line 2, column"},
      {"[]", "not a JSON object"},
      {R"({"task": {"type": "worker", "index": 0}})", "no \"cluster\" object"},
      {R"({"cluster": {"chief": []}, "task": {"type": "worker", "index": 0}})", "cluster.chief[0]"},
      {R"({"cluster": {"chief": [7]}, "task": {"type": "worker", "index": 0}})",
       "cluster.chief[0]"},
      {std::string("{") + kCluster + "}", "no \"task\" object"},
      {TfConfig(R"({"index": 0})"), "task.type is missing"},
      {TfConfig(R"({"type": "ps", "index": 0})"), "task.type is \"ps\""},
      {TfConfig(R"({"type": "worker"})"), "task.index is missing"},
      {TfConfig(R"({"type": "worker", "index": "0"})"), "task.index is \"0\", not an integer"},
      {TfConfig(R"({"type": "worker", "index": 1.5})"), "not an integer"},
      {TfConfig(R"({"type": "worker", "index": 2})"), "task.index 2 is not a worker"},
      {TfConfig(R"({"type": "worker", "index": -1})"), "task.index -1 is not a worker"},
  };
  for (const auto& [json, want] : cases) {
    SCOPED_TRACE(json);
    const absl::Status s = ClientOptions::FromTfConfigJson(json).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("TF_CONFIG: "));
    EXPECT_THAT(s.message(), HasSubstr(want));
  }
}

TEST(ClientOptionsTest, OptimizerOptionsKeepUnsetFieldsUnset) {
  OptimizerConfig p = ToProto(OptimizerOptions{});
  EXPECT_EQ(p.name(), "sgd");
  EXPECT_EQ(p.learning_rate(), 0.01);
  EXPECT_FALSE(p.has_beta1());
  EXPECT_FALSE(p.has_epsilon());
  EXPECT_FALSE(p.has_rho());
  EXPECT_FALSE(p.has_learning_rate_power());
  EXPECT_EQ(p.schedule().kind(), "constant");

  p = ToProto(OptimizerOptions{.name = "adam",
                               .learning_rate = 0.001,
                               .beta1 = 0.8,
                               .beta2 = 0.99,
                               .epsilon = 1e-6,
                               .rho = 0.9,
                               .learning_rate_power = -0.25,
                               .clip_norm = 5,
                               .schedule = {.kind = "step", .step_size = 10, .decay_rate = 0.5}});
  EXPECT_EQ(p.name(), "adam");
  EXPECT_EQ(p.beta1(), 0.8);
  EXPECT_EQ(p.beta2(), 0.99);
  EXPECT_EQ(p.epsilon(), 1e-6);
  EXPECT_EQ(p.rho(), 0.9);
  EXPECT_EQ(p.learning_rate_power(), -0.25);
  EXPECT_EQ(p.clip_norm(), 5);
  EXPECT_EQ(p.schedule().kind(), "step");
  EXPECT_EQ(p.schedule().step_size(), 10);
  EXPECT_EQ(p.schedule().decay_rate(), 0.5);
}

TEST(ClientOptionsTest, InitializerOptionsCarryEveryField) {
  const InitializerDef p = InitializerDefOf(InitializerOptions{
      .kind = "uniform", .value = 1, .low = -2, .high = 3, .mean = 4, .stddev = 5, .seed = 6});
  EXPECT_EQ(p.kind(), "uniform");
  EXPECT_EQ(p.value(), 1);
  EXPECT_EQ(p.low(), -2);
  EXPECT_EQ(p.high(), 3);
  EXPECT_EQ(p.mean(), 4);
  EXPECT_EQ(p.stddev(), 5);
  EXPECT_EQ(p.seed(), 6u);
  EXPECT_EQ(InitializerDefOf(InitializerOptions{}).kind(), "zeros");
}

}  // namespace
}  // namespace pstrain
