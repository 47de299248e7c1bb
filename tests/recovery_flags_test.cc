// The recovery flags on the command line (docs/recovery.md): a bad --task_rows and a --restarted
// chief without a checkpoint to restore from are refused before any process starts, naming the
// flag; --restarted stays out of the help.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class RecoveryFlagsTest : public ProcessTest {};

TEST_F(RecoveryFlagsTest, BadFlagsAreRefusedNamingTheFlag) {
  Result r = RunTagged({PSTRAIN_BINARY, "launch", "--task_rows", "-5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--task_rows -5 must be -1 (auto), 0 (fixed shards, no recovery) "
                               "or a number of rows"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--restarted"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--restarted is for a chief restarted with --restore_from"));
  r = RunTagged({PSTRAIN_BINARY, "launch", "--heartbeat_secs", "20"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--heartbeat_secs 20 must be positive and less than "
                               "--heartbeat_timeout_secs 10"));
}

TEST_F(RecoveryFlagsTest, TheHelpShowsTheAutoDefaultAndHidesRestarted) {
  const Result r = RunTagged({PSTRAIN_BINARY, "launch", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--task_rows INT=-1"));
  EXPECT_THAT(r.out, Not(HasSubstr("--restarted")));
}

}  // namespace
}  // namespace pstrain::testing
