// examples/linear_regression as a user would run it: a chief in external mode, two PS and two
// client programs, each a real process configured by TF_CONFIG.
#include <algorithm>
#include <filesystem>
#include <numeric>
#include <thread>

#include "absl/strings/str_join.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace pstrain::testing;

// A job of the example: its mode and each worker's --steps.
struct Job {
  std::string mode;
  std::vector<int> steps;  // by worker task
};
void PrintTo(const Job& job, std::ostream* os) {
  *os << job.mode << " with --steps " << absl::StrJoin(job.steps, ",");
}

// Built next to the pstrain binary (top-level CMakeLists.txt).
std::string ExampleBinary() {
  return (std::filesystem::path(PSTRAIN_BINARY).parent_path() / "linear_regression").string();
}

class ExampleTest : public ::testing::TestWithParam<Job> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(ExampleBinary())) {
      GTEST_FAIL() << ExampleBinary() << " is missing: build the linear_regression target";
    }
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    tag_value_ = std::to_string(getpid()) + "-" + name.substr(name.rfind('/') + 1);
  }

  // Processes a failed assertion left behind: all were started by this test.
  void TearDown() override {
    for (pid_t pid : ProcessesTagged("PSTRAIN_TEST_TAG=" + tag_value_)) kill(pid, SIGKILL);
  }

  // Every process gets the tag, so none can be missed by the leftover check.
  std::map<std::string, std::string> TfConfig(const std::string& cluster, const std::string& type,
                                              int index) const {
    return {{"PSTRAIN_TEST_TAG", tag_value_},
            {"TF_CONFIG", "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type +
                              "\", \"index\": " + std::to_string(index) + "}}"}};
  }

  std::string tag_value_;
};

// Trains to the true weights in every consistency mode; every process exits 0 by itself. With
// workers taking different numbers of steps, the one that finishes first waits at the barrier
// without holding back the other's sync steps or ssp clocks, and the final Pull does not wait
// for a step that never comes.
TEST_P(ExampleTest, LinearRegressionLearnsTheTrueWeights) {
  const Job job = GetParam();
  const std::vector<int> ports = FreePorts(5);
  auto addr = [&](int i) { return "\"127.0.0.1:" + std::to_string(ports[i]) + "\""; };
  const std::string cluster = "{\"chief\": [" + addr(0) + "], \"ps\": [" + addr(1) + ", " +
                              addr(2) + "], \"worker\": [" + addr(3) + ", " + addr(4) + "]}";
  const int max_steps = *std::max_element(job.steps.begin(), job.steps.end());
  const int total_steps = std::accumulate(job.steps.begin(), job.steps.end(), 0);
  const std::string steps_flag = absl::StrJoin(job.steps, ",");

  // Clients and PS first: they wait for the chief, which is started last.
  std::vector<Proc> examples;
  for (int i = 0; i < 2; ++i) {
    examples.push_back(Start({ExampleBinary(), "--steps", steps_flag, "--timeout", "60"},
                             TfConfig(cluster, "worker", i)));
  }
  std::vector<Proc> ps;
  for (int i = 0; i < 2; ++i) {
    ps.push_back(
        Start({PSTRAIN_BINARY, "server", "--connect_timeout", "60"}, TfConfig(cluster, "ps", i)));
  }
  std::vector<std::string> chief = {PSTRAIN_BINARY,      "server",   "--job",  "chief",
                                    "--model",           "external", "--mode", job.mode,
                                    "--connect_timeout", "60"};
  if (job.mode == "ssp") chief.insert(chief.end(), {"--staleness", "2"});
  const Proc chief_proc = Start(chief, TfConfig(cluster, "chief", 0));

  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("worker " + std::to_string(i));
    const Result r = Wait(examples[i], 180);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string line = LastJsonLine(r.out);
    ASSERT_FALSE(line.empty()) << r.out << r.err;
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["task"], i);
    EXPECT_EQ(j["mode"], job.mode);
    EXPECT_EQ(j["steps"], job.steps[i]);
    // y = X w* + b* + N(0, 0.01^2): the error left is the noise's.
    EXPECT_LT(j["w_error"].get<double>(), 0.02) << line;
    EXPECT_LT(j["b_error"].get<double>(), 0.02) << line;
    EXPECT_LT(j["mse"].get<double>(), 1e-3) << line;
    // After the barrier every push is applied. Sync: one step per round of pushes, and the
    // rounds of the worker training alone count too; else every push is an update.
    EXPECT_EQ(j["global_step"], job.mode == "sync" ? max_steps : total_steps) << line;
  }
  const Result c = Wait(chief_proc, 60);
  EXPECT_EQ(c.exit_code, 0) << c.err;
  const std::string line = LastJsonLine(c.out);
  ASSERT_FALSE(line.empty()) << c.out << c.err;
  const nlohmann::json j = nlohmann::json::parse(line);
  if (j.contains("steps")) {
    EXPECT_EQ(j["steps"], total_steps) << line;
  }
  for (const Proc& p : ps) {
    const Result r = Wait(p, 30);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_THAT(ProcessesTagged("PSTRAIN_TEST_TAG=" + tag_value_), ::testing::IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Modes, ExampleTest,
                         ::testing::Values(Job{"async", {200, 200}}, Job{"sync", {200, 200}},
                                           Job{"ssp", {200, 200}}, Job{"sync", {120, 200}},
                                           Job{"ssp", {120, 200}}),
                         [](const auto& info) {
                           const Job& job = info.param;
                           const bool equal = job.steps[0] == job.steps[1];
                           return job.mode + (equal ? "" : "_UnequalSteps");
                         });

// The client API itself, in this process as the only worker, against a real chief and two PS.
TEST(ClientApiTest, CreatePullPushBarrierDone) {
  const std::string tag = std::to_string(getpid()) + "-ClientApi";
  const std::vector<int> ports = FreePorts(4);
  auto addr = [&](int i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  const std::string cluster = "{\"chief\": [\"" + addr(0) + "\"], \"ps\": [\"" + addr(1) +
                              "\", \"" + addr(2) + "\"], \"worker\": [\"" + addr(3) + "\"]}";
  auto env = [&](const std::string& type, int index) {
    return std::map<std::string, std::string>{
        {"PSTRAIN_TEST_TAG", tag},
        {"TF_CONFIG", "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type +
                          "\", \"index\": " + std::to_string(index) + "}}"}};
  };
  const Proc chief = Start({PSTRAIN_BINARY, "server", "--job", "chief", "--model", "external",
                            "--connect_timeout", "60"},
                           env("chief", 0));
  std::vector<Proc> ps;
  for (int i = 0; i < 2; ++i) ps.push_back(Start({PSTRAIN_BINARY, "server"}, env("ps", i)));

  // The PS addresses come from the chief.
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect({.chief = addr(0), .task = 0});
  ASSERT_TRUE(c.ok()) << c.status();
  Client& client = **c;
  EXPECT_EQ(client.mode(), "async");
  EXPECT_EQ(client.num_ps(), 2);
  EXPECT_EQ(client.num_workers(), 1);
  std::vector<const float*> values;
  EXPECT_EQ(client.Pull(&values).code(), absl::StatusCode::kFailedPrecondition);

  VariableOptions w{.name = "w",
                    .shape = {3, 2},
                    .initializer = {.kind = "constant", .value = 1.5},
                    .optimizer = OptimizerOptions{.name = "sgd", .learning_rate = 0.5},
                    .partitioner = "fixed:2"};  // a shard per PS
  EXPECT_EQ(client.CreateVariable(w).value_or(-1), 0);
  EXPECT_EQ(client.CreateVariable(w).value_or(-1), 0);  // get-or-create
  VariableOptions other = w;
  other.shape = {4};
  EXPECT_EQ(client.CreateVariable(other).status().code(), absl::StatusCode::kInvalidArgument);
  VariableOptions b{.name = "b", .shape = {}};  // a scalar, zeros
  b.optimizer = w.optimizer;
  EXPECT_EQ(client.CreateVariable(b).value_or(-1), 1);

  std::vector<Tensor> grads = {Tensor({3, 2}, 1.0f), Tensor::Scalar(2.0f)};
  EXPECT_EQ(client.Push(grads).code(), absl::StatusCode::kFailedPrecondition);  // no Pull yet
  ASSERT_TRUE(client.Pull(&values).ok());
  ASSERT_EQ(values.size(), 2u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[0][i], 1.5f) << i;
  EXPECT_EQ(values[1][0], 0.0f);
  EXPECT_EQ(client.global_step(), 0);
  EXPECT_THAT(client.Push({grads[0]}).message(), HasSubstr("1 gradients for 2 variables"));
  EXPECT_EQ(client.Push({grads[0], Tensor({1})}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client.Push(grads, 8, 0.25).ok());
  ASSERT_TRUE(client.Pull(&values).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[0][i], 1.0f) << i;  // 1.5 - 0.5 * 1
  EXPECT_EQ(values[1][0], -1.0f);                                  // 0 - 0.5 * 2
  EXPECT_EQ(client.global_step(), 1);
  EXPECT_EQ(client.pushes(), 1);
  EXPECT_TRUE(client.Barrier("end").ok());
  EXPECT_TRUE(client.Done().ok());
  EXPECT_EQ(client.Done().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.Pull(&values).code(), absl::StatusCode::kFailedPrecondition);

  const Result r = Wait(chief, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const Proc& p : ps) EXPECT_EQ(Wait(p, 30).exit_code, 0);
  for (pid_t pid : ProcessesTagged("PSTRAIN_TEST_TAG=" + tag)) kill(pid, SIGKILL);
}

// A barrier that times out says, from the chief, which worker never came.
TEST(ClientApiTest, ABarrierTimeoutNamesTheWorkerThatHasNotArrived) {
  const std::string tag = std::to_string(getpid()) + "-BarrierTimeout";
  const std::vector<int> ports = FreePorts(4);
  auto addr = [&](int i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  const std::string cluster = "{\"chief\": [\"" + addr(0) + "\"], \"ps\": [\"" + addr(1) +
                              "\"], \"worker\": [\"" + addr(2) + "\", \"" + addr(3) + "\"]}";
  auto env = [&](const std::string& type) {
    return std::map<std::string, std::string>{
        {"PSTRAIN_TEST_TAG", tag},
        {"TF_CONFIG",
         "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type + "\", \"index\": 0}}"}};
  };
  const Proc chief = Start({PSTRAIN_BINARY, "server", "--job", "chief", "--model", "external",
                            "--mode", "sync", "--connect_timeout", "60"},
                           env("chief"));
  const Proc ps = Start({PSTRAIN_BINARY, "server"}, env("ps"));
  // The 15 s below is the barrier's deadline, not time for the tasks to start: wait for them.
  ASSERT_TRUE(WaitUntilListening(ports[0]) && WaitUntilListening(ports[1]))
      << "the chief or the PS does not serve";
  absl::StatusOr<std::unique_ptr<Client>> late;
  std::thread connect_late(
      [&] { late = Client::Connect({.chief = addr(0), .task = 1, .timeout = absl::Seconds(60)}); });
  absl::StatusOr<std::unique_ptr<Client>> waiting =
      Client::Connect({.chief = addr(0), .task = 0, .timeout = absl::Seconds(15)});
  connect_late.join();
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  ASSERT_TRUE(late.ok()) << late.status();

  const absl::Status s = (*waiting)->Barrier("end");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"end\""), HasSubstr("worker:1"))) << s;
  EXPECT_TRUE((*late)->Done().ok());
  EXPECT_TRUE((*waiting)->Done().ok());
  EXPECT_EQ(Wait(chief, 60).exit_code, 0);
  EXPECT_EQ(Wait(ps, 30).exit_code, 0);
  for (pid_t pid : ProcessesTagged("PSTRAIN_TEST_TAG=" + tag)) kill(pid, SIGKILL);
}

TEST(ClientApiTest, ConnectSaysWhoItWaitedFor) {
  const std::vector<int> ports = FreePorts(2);  // nothing listens there
  const std::string chief = "127.0.0.1:" + std::to_string(ports[0]);
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Connect({.chief = chief, .timeout = absl::Seconds(1)});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(c.status().message(), HasSubstr("the chief at " + chief));
  EXPECT_EQ(Client::Connect({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Connect({.chief = chief, .task = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientApiTest, ExampleExplainsABadTfConfig) {
  Result r = testing::Run({ExampleBinary()}, {{"TF_CONFIG", "{\"cluster\": {}}"}}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("linear_regression: error: TF_CONFIG: "));
  r = testing::Run({ExampleBinary(), "--steps", "x"}, {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--steps: \"x\" is not a number"));
}

}  // namespace
}  // namespace pstrain
