// Whole clusters of real pstrain processes on 127.0.0.1 training on the real MNIST files.
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

class ClusterTest : public ProcessTest {
 protected:
  void SetUp() override {
    ProcessTest::SetUp();
    RequireMnist();
  }
};

// `pstrain launch` runs chief + 2 PS + 2 workers, trains one epoch, prints the result JSON and
// leaves no process behind.
TEST_F(ClusterTest, LaunchTrainsMnistAndCleansUp) {
  Result r = testing::Run(
      {PSTRAIN_BINARY, "launch", "--ps", "2", "--workers", "2", "--data", MnistDir(), "--hidden",
       "128", "--epochs", "1", "--batch", "64", "--optimizer", "adam", "--lr", "0.001"},
      Env(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string line = LastJsonLine(r.out);
  ASSERT_FALSE(line.empty()) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << line;  // chance is 0.1
  EXPECT_EQ(j["ps"], 2);
  EXPECT_EQ(j["workers"], 2);
  EXPECT_EQ(j["examples"], 60000);
  EXPECT_EQ(j["steps"], 2 * ((30000 + 63) / 64));
  EXPECT_GT(j["examples_per_sec"].get<double>(), 0);
  EXPECT_THAT(r.err, HasSubstr("epoch 1/1"));
}

// Every task started by hand with TF_CONFIG, as a Kubernetes operator would; the chief ends the
// job and every process exits by itself with status 0.
TEST_F(ClusterTest, TfConfigProcessesTrainAndExit) {
  const std::vector<int> ports = FreePorts(5);
  auto addr = [&](int i) { return "\"127.0.0.1:" + std::to_string(ports[i]) + "\""; };
  const std::string cluster = "{\"chief\": [" + addr(0) + "], \"ps\": [" + addr(1) + ", " +
                              addr(2) + "], \"worker\": [" + addr(3) + ", " + addr(4) + "]}";
  auto tf_config = [&](const std::string& type, int index) {
    std::map<std::string, std::string> env = Env();
    env["TF_CONFIG"] = "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type +
                       "\", \"index\": " + std::to_string(index) + "}}";
    return env;
  };
  const std::vector<std::string> server = {PSTRAIN_BINARY, "server", "--connect_timeout", "60"};
  std::vector<Proc> procs;
  // Workers and PS first: they wait for the chief, which is started last.
  for (int i = 0; i < 2; ++i) procs.push_back(Start(server, tf_config("worker", i)));
  for (int i = 0; i < 2; ++i) procs.push_back(Start(server, tf_config("ps", i)));
  std::vector<std::string> chief = server;
  chief.insert(chief.end(), {"--data", MnistDir(), "--hidden", "64", "--epochs", "1", "--optimizer",
                             "sgd", "--lr", "0.1", "--batch", "32"});
  Result c = testing::Run(chief, tf_config("chief", 0), 300);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  nlohmann::json j = nlohmann::json::parse(LastJsonLine(c.out));
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << c.out;
  for (const Proc& p : procs) {
    Result r = Wait(p, 30);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

}  // namespace
}  // namespace pstrain
