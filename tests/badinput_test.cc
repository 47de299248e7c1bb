// Bad input to the pstrain binary: each case gets a one-line error naming the problem, a
// non-zero exit, no hang, and no process left behind.
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using namespace pstrain::testing;

class BadInputTest : public ProcessTest {};

TEST_F(BadInputTest, MalformedTfConfig) {
  Result r = RunTagged({PSTRAIN_BINARY, "server"}, {{"TF_CONFIG", "{\"cluster\": "}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TF_CONFIG: not valid JSON"));
}

TEST_F(BadInputTest, MissingClusterFile) {
  Result r = RunTagged({PSTRAIN_BINARY, "server", "--cluster", dir_ + "/none.json", "--job", "ps"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read cluster file " + dir_ + "/none.json"));
}

TEST_F(BadInputTest, UnknownJobAndTaskIndex) {
  const std::vector<int> p = FreePorts(3);
  const std::string cluster = ClusterFile(p[0], p[1], p[2]);
  Result r =
      RunTagged({PSTRAIN_BINARY, "server", "--cluster", cluster, "--job", "ps", "--task", "3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("task index 3 is out of range for job \"ps\", which has 1 task(s)"));
  r = RunTagged({PSTRAIN_BINARY, "server", "--cluster", cluster, "--job", "boss"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown job \"boss\""));
}

TEST_F(BadInputTest, PortInUse) {
  PortHolder taken;
  const std::vector<int> p = FreePorts(2);
  const std::string cluster = ClusterFile(p[0], taken.port(), p[1]);
  Result r = RunTagged({PSTRAIN_BINARY, "server", "--cluster", cluster, "--job", "ps"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot listen on 127.0.0.1:" + std::to_string(taken.port())));
}

TEST_F(BadInputTest, ChiefUnreachable) {
  const std::vector<int> p = FreePorts(3);
  const std::string cluster = ClusterFile(p[0], p[1], p[2]);
  Result r = RunTagged(
      {PSTRAIN_BINARY, "server", "--cluster", cluster, "--job", "ps", "--connect_timeout", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("gave up waiting for the chief at 127.0.0.1:" +
                               std::to_string(p[0]) + " after 1s"));
}

TEST_F(BadInputTest, TasksThatNeverRegister) {
  const std::vector<int> p = FreePorts(3);
  const std::string cluster = ClusterFile(p[0], p[1], p[2]);
  Result r = RunTagged({PSTRAIN_BINARY, "server", "--cluster", cluster, "--job", "chief",
                        "--connect_timeout", "1", "--data", MnistDir()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("waiting for tasks to register: ps:0, worker:0"));
}

TEST_F(BadInputTest, MissingDataFiles) {
  Result r = RunTagged(
      {PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "1", "--data", dir_ + "/nodata"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(dir_ + "/nodata/t10k-images-idx3-ubyte"));
}

// The chief finds the test set and counts the training labels, but a worker cannot find the
// training images: the worker's error reaches the chief through StartTraining and ends the job.
TEST_F(BadInputTest, WorkerMissingTrainingData) {
  const std::string data = dir_ + "/testonly";
  std::filesystem::create_directories(data);
  for (const char* f :
       {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "train-labels-idx1-ubyte"}) {
    std::filesystem::create_symlink(MnistDir() + "/" + f, data + "/" + f);
  }
  Result r = RunTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "2", "--data", data});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("StartTraining at worker:0"));
  EXPECT_THAT(r.err, HasSubstr(data + "/train-images-idx3-ubyte"));
}

TEST_F(BadInputTest, BadTrainingFlags) {
  Result r = RunTagged({PSTRAIN_BINARY, "launch", "--optimizer", "adagrad-ish"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown optimizer \"adagrad-ish\" (known: sgd, momentum, adagrad, "
                               "adam, rmsprop, ftrl)"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--lr", "-0.5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("learning rate -0.5 must be positive"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--mode", "eventually"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown mode \"eventually\""));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--bogus", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--bogus"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--mode", "ssp", "--staleness", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("staleness -1 is out of range"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--lr", "nan"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("must be positive and finite"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--nonfinite", "ignore"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nonfinite must be skip or stop"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--task_timeout", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--task_timeout 0 must be positive"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--partitioner", "fixed:0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("fixed:0"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--ps", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("at least 1 ps and 1 worker"));
}

// Checks that need the cluster: the chief refuses them before training and stops every task.
TEST_F(BadInputTest, OptimizerAndAggregationOutOfRange) {
  Result r = RunTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "1", "--data",
                        MnistDir(), "--optimizer", "momentum", "--momentum", "1.5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("CreateVariables at ps:0: variable 'dense0/kernel': optimizer "
                               "'momentum': momentum 1.5 must be in [0, 1)"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "2", "--data", MnistDir(),
                 "--mode", "sync", "--replicas_to_aggregate", "3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("replicas_to_aggregate 3 exceeds the 2 workers"));
}

}  // namespace
}  // namespace pstrain
