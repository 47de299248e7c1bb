// What the chief tells users about a job: JobConfig's messages by flag, the checks that need the
// cluster, the progress line and the rounded JSON result.
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/master.h"
#include "master/progress.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string Invalid(const JobConfig& c, int num_ps = 2, int num_workers = 2) {
  absl::Status s = c.ValidateFor(num_ps, num_workers);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(JobConfigTest, DefaultsAreValid) {
  EXPECT_TRUE(JobConfig().Validate().ok());
  EXPECT_TRUE(JobConfig().ValidateFor(1, 1).ok());
}

TEST(JobConfigTest, MessagesNameTheFlag) {
  JobConfig c;
  c.optimizer.mutable_schedule()->set_kind("step");
  EXPECT_THAT(Invalid(c), HasSubstr("--lr_step_size 0 must be positive with --lr_schedule step"));
  c.optimizer.mutable_schedule()->set_step_size(10);
  c.optimizer.mutable_schedule()->set_decay_rate(2);
  EXPECT_THAT(Invalid(c), HasSubstr("--lr_decay_rate 2 must be in (0, 1] with --lr_schedule step"));

  c = JobConfig();
  c.optimizer.set_clip_norm(std::nan(""));
  EXPECT_THAT(Invalid(c), HasSubstr("--clip_norm nan must be non-negative and finite"));
  c.optimizer.set_clip_norm(-1);
  EXPECT_THAT(Invalid(c), HasSubstr("--clip_norm -1 must be non-negative and finite"));

  c = JobConfig();
  c.optimizer.set_name("momentum");
  c.optimizer.set_momentum(1.5);
  EXPECT_THAT(Invalid(c), HasSubstr("--momentum 1.5 must be in [0, 1)"));
  c.optimizer.set_momentum(0);
  c.optimizer.set_nesterov(true);
  EXPECT_THAT(Invalid(c), HasSubstr("--nesterov requires --momentum > 0"));

  c = JobConfig();
  c.optimizer.set_learning_rate(-1);
  EXPECT_THAT(Invalid(c), HasSubstr("--lr -1 must be positive and finite"));
  c = JobConfig();
  c.partitioner = "fixed:0";
  EXPECT_THAT(Invalid(c), HasSubstr("--partitioner: bad partitioner \"fixed:0\""));
  c = JobConfig();
  c.push_bucket_bytes = -5;
  EXPECT_THAT(Invalid(c), HasSubstr("--push_bucket_bytes -5 must be non-negative"));
  c = JobConfig();
  c.end_delay_ms = -1;
  EXPECT_THAT(Invalid(c), HasSubstr("--end_delay_ms -1 must be non-negative"));
}

TEST(JobConfigTest, CosineNeedsItsLengthUnlessTheMlpJobSetsIt) {
  JobConfig c;
  c.optimizer.mutable_schedule()->set_kind("cosine");
  EXPECT_TRUE(c.Validate().ok());  // the mlp job's own length
  c.model = "external";
  EXPECT_THAT(Invalid(c), HasSubstr("--lr_total_steps 0 must exceed --warmup_steps 0"));
  c.optimizer.mutable_schedule()->set_total_steps(100);
  EXPECT_TRUE(c.Validate().ok());
}

TEST(JobConfigTest, ValidateForChecksWhatDependsOnTheCluster) {
  JobConfig c;
  c.replicas_to_aggregate = 3;
  EXPECT_THAT(Invalid(c, 1, 2), HasSubstr("--replicas_to_aggregate 3 exceeds the 2 workers"));
  EXPECT_TRUE(c.ValidateFor(1, 3).ok());
  c = JobConfig();
  c.slow_worker = 2;
  EXPECT_THAT(Invalid(c, 1, 2), HasSubstr("--slow_worker 2 is not a worker"));
  EXPECT_THAT(Invalid(JobConfig(), 0, 2), HasSubstr("0 ps tasks"));
  EXPECT_THAT(Invalid(JobConfig(), 1, 0), HasSubstr("0 workers"));
}

TEST(JobConfigTest, TheTaskQueueIsOnByDefaultInEveryModeWithSaneHeartbeats) {
  JobConfig c;
  EXPECT_EQ(c.task_rows, -1);
  for (const char* mode : {"async", "sync", "ssp"}) {
    c.mode = mode;
    EXPECT_TRUE(c.ValidateFor(2, 2).ok()) << mode;
    c.task_rows = 1000;
    EXPECT_TRUE(c.ValidateFor(2, 2).ok()) << mode;
    c.task_rows = -1;
  }
  c.task_rows = -2;
  EXPECT_THAT(Invalid(c), HasSubstr("--task_rows -2 must be -1 (auto), 0 (fixed shards, no "
                                    "recovery) or a number of rows"));
  c.task_rows = -1;
  c.heartbeat_timeout_secs = 0.5;
  EXPECT_THAT(Invalid(c), HasSubstr("--heartbeat_secs 1 must be positive and less than "
                                    "--heartbeat_timeout_secs 0.5"));
  c.task_rows = 0;  // fixed shards: no heartbeats
  EXPECT_TRUE(c.ValidateFor(2, 2).ok());
  c.heartbeat_timeout_secs = 10;
  c.model = "external";
  c.task_rows = -1;  // the default: no queue for client programs
  EXPECT_TRUE(c.ValidateFor(2, 2).ok());
  c.checkpoint_dir = "/ckpt";  // a client program's job saves and restores too
  c.restore_from = "/ckpt";
  c.checkpoint_every_secs = 10;
  EXPECT_TRUE(c.ValidateFor(2, 2).ok());
  c.task_rows = 1000;
  EXPECT_THAT(Invalid(c), HasSubstr("--task_rows with --model external needs --rows"));
  c.rows = 60000;  // client programs with a task queue
  EXPECT_TRUE(c.ValidateFor(2, 2).ok());
  EXPECT_EQ(c.TaskRows(c.rows, 2), 1000);
  c.task_rows = -1;  // auto: an eighth of a worker's share
  EXPECT_EQ(c.TaskRows(c.rows, 2), 3750);
  c.task_rows = 0;
  EXPECT_EQ(c.TaskRows(c.rows, 2), 0);
  c.rows = -1;
  EXPECT_THAT(Invalid(c), HasSubstr("--rows -1 must be non-negative"));
  c.rows = 10;
  c.model = "mlp";
  EXPECT_THAT(Invalid(c), HasSubstr("--rows is for client programs"));
}

TEST(JobConfigTest, AutoEpochsSeeAnExampleBudgetThatIsSmallerWithADeepPart) {
  JobConfig c;
  c.epochs = 7;  // given: kept
  EXPECT_EQ(c.EpochsFor(10), 7);
  c.epochs = kAutoEpochs;
  c.model = "linear";  // 50,000 examples, from 1 to 100 epochs
  EXPECT_EQ(c.EpochsFor(166), 100);
  EXPECT_EQ(c.EpochsFor(614), 82);
  EXPECT_EQ(c.EpochsFor(50000), 1);
  EXPECT_EQ(c.EpochsFor(10000000), 1);
  for (const char* deep : {"mlp", "wide_deep"}) {  // 5,000 examples
    c.model = deep;
    EXPECT_EQ(c.EpochsFor(10), 100) << deep;
    EXPECT_EQ(c.EpochsFor(166), 31) << deep;
    EXPECT_EQ(c.EpochsFor(614), 9) << deep;
    EXPECT_EQ(c.EpochsFor(5000), 1) << deep;
  }
}

TEST(JobConfigTest, AutoTaskRowsAreUpTo200BatchesAnEighthOfAWorkersShareWholeBatches) {
  JobConfig c;
  c.batch_size = 64;
  // 60000 rows, 2 workers: ceil(60000 / 16) = 3750, rounded up to 59 batches of 64.
  EXPECT_EQ(c.TaskRows(60000, 2), 3776);
  // Many rows: at most 200 batches.
  EXPECT_EQ(c.TaskRows(100000000, 2), 200 * 64);
  // Few rows: at least one batch.
  EXPECT_EQ(c.TaskRows(10, 4), 64);
  c.task_rows = 0;
  EXPECT_EQ(c.TaskRows(60000, 2), 0);
  c.task_rows = 1000;
  EXPECT_EQ(c.TaskRows(60000, 2), 1000);
  c.model = "external";
  c.task_rows = -1;
  EXPECT_EQ(c.TaskRows(0, 2), 0);  // client programs without --rows: no queue
  EXPECT_EQ(c.TaskRows(60000, 2), 3750);
}

TEST(JobConfigTest, ARestartedChiefNeedsACheckpointToRestoreFrom) {
  JobConfig c;
  c.restarted = true;
  EXPECT_THAT(Invalid(c), HasSubstr("--restarted is for a chief restarted with --restore_from"));
  c.restore_from = "/tmp/ckpt";
  EXPECT_TRUE(c.ValidateFor(2, 2).ok());
}

TEST(JobResultTest, TheLedgerTotalsAreInTheJsonWithTheTaskQueue) {
  JobResult r;
  EXPECT_FALSE(nlohmann::json::parse(r.ToJson()).contains("tasks"));
  r.task_queue = true;
  r.tasks = r.tasks_applied = 120;
  r.tasks_redone = 1;
  r.workers_declared_dead = 1;
  nlohmann::json j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j["tasks"], 120);
  EXPECT_EQ(j["tasks_redone"], 1);
  EXPECT_EQ(j["tasks_applied_once"], true);
  EXPECT_FALSE(j.contains("ledger_problem"));
  EXPECT_EQ(j["failures_survived"], 0);
  EXPECT_EQ(j["duplicates_dropped"], 0);
  r.ledger_check = "task 3 of epoch 0 was applied 0 times";
  j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j["tasks_applied_once"], false);
  EXPECT_EQ(j["ledger_problem"], r.ledger_check);
}

TEST(JobResultTest, TheFailuresSurvivedAreTheirSum) {
  JobResult r;
  r.task_queue = true;
  r.workers_replaced = 1;
  r.rollbacks = 2;
  r.chief_restarts = 3;
  r.restarts_after_end = 4;
  r.ps_stats.set_duplicates_dropped(7);
  const nlohmann::json j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j["failures_survived"], 10);
  EXPECT_EQ(j["restarts_after_end"], 4);
  EXPECT_EQ(j["workers_replaced"], 1);
  EXPECT_EQ(j["rollbacks"], 2);
  EXPECT_EQ(j["chief_restarts"], 3);
  EXPECT_EQ(j["duplicates_dropped"], 7);
}

TEST(ProgressLineTest, ShowsTheGlobalStepOutOfTheTotalElapsedAndEta) {
  ProgressView v;
  v.epoch = 2;
  v.epochs = 3;
  v.step = 1200;
  v.total = 2400;
  v.loss = 0.12344;
  v.examples_per_sec = 13500.4;
  v.elapsed = absl::Seconds(8.5);
  EXPECT_EQ(ProgressLine(v),
            "progress epoch 2/3 step 1200/2400 loss 0.1234 examples/s 13500 elapsed 8s eta 8s");
  // External jobs: no epochs, no total, so no ETA.
  v.epochs = 0;
  v.total = 0;
  EXPECT_EQ(ProgressLine(v), "progress step 1200 loss 0.1234 examples/s 13500 elapsed 8s");
  // A client program that pushes no loss: the line shows none rather than 0.
  v.has_loss = false;
  EXPECT_EQ(ProgressLine(v), "progress step 1200 examples/s 13500 elapsed 8s");
  EXPECT_EQ(WholeSeconds(absl::Seconds(125.7)), "2m5s");
}

// The deadlock of issue 2 as the job loop sees it: worker:0 waits at the barrier "end" (and so
// reports nothing), worker:1 is stuck elsewhere. The silent one is named, not the waiting one.
TEST(CheckWorkersTest, NamesTheSilentWorkerAndWhatTheOthersWaitFor) {
  const absl::Time now = absl::Now();
  const absl::Duration timeout = absl::Minutes(2);
  std::vector<WorkerProgress> p(3);
  p[0].last_report = now - absl::Minutes(5);
  p[0].barrier = "end";
  p[1].last_report = now - absl::Minutes(3);
  p[2].done = true;
  p[2].last_report = now - absl::Minutes(9);
  const std::vector<absl::Time> started(3, now - absl::Minutes(10));
  absl::Status s = CheckWorkers(p, started, now, timeout);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "worker:1 sent no progress for 2m; worker:0 waits at barrier \"end\"");
  // Known alive recently (the chief itself was stalled until now): not silent.
  const std::vector<absl::Time> resumed(3, now);
  EXPECT_TRUE(CheckWorkers(p, resumed, now, timeout).ok());
  // A reported error ends the job whatever else.
  p[2].error = "out of memory";
  EXPECT_EQ(CheckWorkers(p, resumed, now, timeout).message(), "worker:2 failed: out of memory");
}

TEST(JobResultTest, JsonKeepsItsKeysAddsStepsAndRounds) {
  JobResult r;
  r.mode = "sync";
  r.seconds = 2.8000000000000003;
  r.examples_per_sec = 21297.6;
  r.final_loss = 0.183449;
  r.loss_reported = true;
  r.test_accuracy = 0.9440000000000001;
  r.steps = 1876;
  r.global_step = 938;
  r.total_steps = 938;
  r.worker_pushes = 1870;
  const nlohmann::json j = nlohmann::json::parse(r.ToJson());
  for (const char* key : {"mode", "steps", "worker_steps", "test_accuracy", "updates_applied",
                          "stale_dropped", "pulls_waited", "max_clock_gap", "nonfinite_rejected",
                          "examples", "global_step", "total_steps", "worker_pushes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["global_step"], 938);
  EXPECT_EQ(j["worker_pushes"], 1870);
  EXPECT_EQ(j.dump().find("0000000"), std::string::npos) << j.dump();
  EXPECT_EQ(j["examples_per_sec"], 21298);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 2.8);
  EXPECT_DOUBLE_EQ(j["final_loss"].get<double>(), 0.1834);
  EXPECT_DOUBLE_EQ(j["test_accuracy"].get<double>(), 0.944);
  // No worker reported a loss (a client program's pushes need not): no final_loss at all.
  r.loss_reported = false;
  EXPECT_FALSE(nlohmann::json::parse(r.ToJson()).contains("final_loss"));
}

}  // namespace
}  // namespace pstrain
