// Bad input to the pstrain binary: each case gets a one-line error naming the problem, a
// non-zero exit, no hang, and no process left behind.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;
using namespace pstrain::testing;

class BadInputTest : public ProcessTest {};

TEST_F(BadInputTest, MalformedTfConfig) {
  Result r = RunTagged({PSTRAIN_BINARY, "server"}, {{"TF_CONFIG", "{\"cluster\": "}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TF_CONFIG: not valid JSON: line 1, column 13: "));
  r = RunTagged({PSTRAIN_BINARY, "server"}, {{"TF_CONFIG", "{\"cluster\": {},\n  \"task\" 1}"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TF_CONFIG: not valid JSON: line 2, column 10: "));
}

// TF_CONFIG's "task" is not needed when --job and --task name the task, as the README says.
TEST_F(BadInputTest, BadTaskEntryDoesNotMatterWithJobAndTask) {
  const std::vector<int> p = FreePorts(3);
  const std::string tf_config = "{\"cluster\": {\"chief\": [\"127.0.0.1:" + std::to_string(p[0]) +
                                "\"], \"ps\": [\"127.0.0.1:" + std::to_string(p[1]) +
                                "\"], \"worker\": [\"127.0.0.1:" + std::to_string(p[2]) +
                                "\"]}, \"task\": {\"type\": \"trainer\", \"index\": 9}}";
  Result r = RunTagged({PSTRAIN_BINARY, "server"}, {{"TF_CONFIG", tf_config}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TF_CONFIG: task: unknown job \"trainer\""));
  r = RunTagged({PSTRAIN_BINARY, "server", "--job", "ps", "--task", "0", "--connect_timeout", "1"},
                {{"TF_CONFIG", tf_config}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, Not(HasSubstr("trainer")));
  EXPECT_THAT(r.err, HasSubstr("gave up waiting for the chief"));
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
  // One line: gRPC's own log of the failed bind is not shown at the default log level.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
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
  EXPECT_THAT(r.err, HasSubstr("--optimizer \"adagrad-ish\" is not a known optimizer (known: sgd, "
                               "momentum, adagrad, adam, rmsprop, ftrl)"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--lr", "-0.5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--lr -0.5 must be positive"));
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
  EXPECT_THAT(r.err, HasSubstr("the cluster has 0 ps tasks; a job needs 1 to 4096"));
}

// Flags checked against the cluster's size before any process starts (exit 2, not the chief's 1).
TEST_F(BadInputTest, AggregationCheckedAgainstWorkersBeforeStart) {
  Result r = RunTagged({PSTRAIN_BINARY, "launch", "--ps", "1", "--workers", "2", "--data",
                        MnistDir(), "--mode", "sync", "--replicas_to_aggregate", "3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("replicas_to_aggregate 3"));
  EXPECT_THAT(r.err, Not(HasSubstr("chief")));
}

TEST_F(BadInputTest, VersionHelpAndSuggestions) {
  Result r = RunTagged({PSTRAIN_BINARY, "--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, MatchesRegex("pstrain [^ ]+\n"));
  r = RunTagged({PSTRAIN_BINARY, "lanch"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command lanch; did you mean launch?"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--epoch", "3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --epoch; did you mean --epochs?"));
  r = RunTagged({PSTRAIN_BINARY, "server", "--conect_timeout=3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --conect_timeout; did you mean --connect_timeout?"));
  // launch --help lists the training flags it passes on to the chief.
  r = RunTagged({PSTRAIN_BINARY, "launch", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--workers", "--epochs", "--optimizer", "--lr_schedule", "--mode",
                           "--partitioner", "--task_timeout"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

TEST_F(BadInputTest, FlagErrorsNameTheFlag) {
  Result r = RunTagged({PSTRAIN_BINARY, "launch", "--log_level", "verbose"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--log_level: verbose not in {trace,debug,info,warn,error"));
  r = RunTagged({PSTRAIN_BINARY, "server", "--log_level", "chatty"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--log_level: chatty not in"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--clip_norm", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--clip_norm -1 must be non-negative and finite"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--lr_schedule", "step", "--lr_decay_rate", "0.5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--lr_step_size 0 must be positive with --lr_schedule step"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--lr_schedule", "linear"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--lr_schedule: unknown learning-rate schedule \"linear\""));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--optimizer", "momentum", "--momentum", "1.5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--momentum 1.5 must be in [0, 1)"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--optimizer", "adam", "--beta1", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--beta1 1 must be in [0, 1)"));
}

// Flags that have no effect are named in a warning; the command goes on.
TEST_F(BadInputTest, FlagsThatDoNotApplyWarn) {
  Result r = RunTagged({PSTRAIN_BINARY, "launch", "--optimizer", "sgd", "--beta1", "0.5",
                        "--staleness", "2", "--ps", "0"});
  EXPECT_THAT(r.err, HasSubstr("warning: --beta1 does not apply to --optimizer sgd (only to "
                               "adam); it is ignored"));
  EXPECT_THAT(r.err, HasSubstr("warning: --staleness does not apply to --mode async"));
  EXPECT_THAT(r.err, HasSubstr("the cluster has 0 ps tasks"));
  const std::vector<int> p = FreePorts(3);
  r = RunTagged({PSTRAIN_BINARY, "server", "--cluster", ClusterFile(p[0], p[1], p[2]), "--job",
                 "ps", "--connect_timeout", "1", "--epochs", "5", "--lr", "0.1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("warning: --epochs, --lr are read by the chief only; ps:0 ignores "
                               "them"));
}

}  // namespace
}  // namespace pstrain
