// What the chief makes of the model flags: the tables' definitions (whole-table caps divided
// over the PS) and the checks of the data and table flags, by flag name.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/master.h"
#include "master/model_job.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(TableDefTest, CarriesTheFlagsAndSharesTheCapsOverThePs) {
  JobConfig c;
  c.admit_after = 3;
  c.unadmitted_zeros = true;
  c.evict_after_steps = 100;
  c.table_max_rows = 1001;
  c.table_max_bytes = 1 << 20;
  TableSpec t;
  t.name = "embedding/C7";
  t.dim = 16;
  t.initializer.kind = "truncated_normal";
  t.initializer.stddev = 0.25;
  t.initializer.seed = 1006;
  const TableDef d = TableDefOf(t, c, 2);
  EXPECT_EQ(d.name(), "embedding/C7");
  EXPECT_EQ(d.dim(), 16);
  EXPECT_EQ(d.initializer().kind(), "truncated_normal");
  EXPECT_DOUBLE_EQ(d.initializer().stddev(), 0.25);
  EXPECT_EQ(d.initializer().seed(), 1006u);
  EXPECT_EQ(d.optimizer().name(), "adagrad");
  EXPECT_DOUBLE_EQ(d.optimizer().learning_rate(), 0.1);
  EXPECT_EQ(d.admit_after(), 3);
  EXPECT_TRUE(d.unadmitted_zeros());
  EXPECT_EQ(d.evict_after_steps(), 100);
  EXPECT_EQ(d.max_rows(), 501);  // rounded up: a cap stays a cap
  EXPECT_EQ(d.max_bytes(), 1 << 19);
  EXPECT_EQ(TableDefOf(t, JobConfig(), 3).max_rows(), 0);  // no cap stays no cap
}

TEST(TableDefTest, AModelsOwnOptimizerUnlessTheTableFlagsAreGiven) {
  TableSpec t;
  t.name = "wide";
  t.dim = 1;
  t.optimizer = TableOptimizer{"ftrl", 0.05, 1e-6, 0.001, 0.02};
  JobConfig c;
  TableDef d = TableDefOf(t, c, 2);
  EXPECT_EQ(d.optimizer().name(), "ftrl");
  EXPECT_DOUBLE_EQ(d.optimizer().learning_rate(), 0.05);
  EXPECT_DOUBLE_EQ(d.optimizer().initial_accumulator_value(), 1e-6);
  EXPECT_DOUBLE_EQ(d.optimizer().l1(), 0.001);
  EXPECT_DOUBLE_EQ(d.optimizer().l2(), 0.02);
  // --table_optimizer or --table_lr on the command line: the flags' optimizer for every table.
  c.table_optimizer.set_learning_rate(0.3);
  c.table_optimizer_given = true;
  d = TableDefOf(t, c, 2);
  EXPECT_EQ(d.optimizer().name(), "adagrad");
  EXPECT_DOUBLE_EQ(d.optimizer().learning_rate(), 0.3);
  EXPECT_DOUBLE_EQ(d.optimizer().l2(), 0);
}

std::string Invalid(const JobConfig& c) {
  absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(ModelFlagsTest, MessagesNameTheFlag) {
  JobConfig c;
  c.model = "xgboost";
  EXPECT_THAT(Invalid(c), HasSubstr("--model: unknown model \"xgboost\" (known: mlp, linear, "
                                    "wide_deep, external)"));
  c = JobConfig();
  c.model = "wide_deep";
  c.data = "parquet:x";
  EXPECT_THAT(Invalid(c), HasSubstr("--data: data \"parquet:x\": unknown format"));
  c.data = "criteo:x";
  c.test_data = "csv:";
  EXPECT_THAT(Invalid(c), HasSubstr("--test_data: data \"csv:\": the path is empty"));
  c.test_data = "";
  c.holdout = 1;
  EXPECT_THAT(Invalid(c), HasSubstr("--holdout 1 must be in (0, 1)"));
  c.holdout = 0.1;
  c.embedding_dim = 0;
  EXPECT_THAT(Invalid(c), HasSubstr("--embedding_dim 0 is out of range"));
  c.embedding_dim = 8;
  c.table_optimizer.set_name("rmsprop");
  EXPECT_THAT(Invalid(c), HasSubstr("--table_optimizer: unknown table optimizer \"rmsprop\""));
  c.table_optimizer.set_name("adagrad");
  c.table_optimizer.set_learning_rate(-1);
  EXPECT_THAT(Invalid(c), HasSubstr("--table_lr -1 must be positive"));
  c.table_optimizer.set_learning_rate(0.1);
  c.table_max_rows = -5;
  EXPECT_THAT(Invalid(c), HasSubstr("--table_max_rows -5 must be non-negative"));
  c.table_max_rows = 0;
  EXPECT_TRUE(c.Validate().ok());
  // External programs bring their own data: --data is not checked.
  c.model = "external";
  c.data = "parquet:x";
  EXPECT_TRUE(c.Validate().ok());
}

}  // namespace
}  // namespace pstrain
