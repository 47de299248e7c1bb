// The flags `pstrain launch` gives a chief it restarts (docs/recovery.md): from the launcher's
// checkpoint directory once this job saved a checkpoint there, before that from the user's own
// --restore_from or --resume, and from scratch only when the user asked for no restore.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/launch_supervisor.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kDir[] = "/ckpt/launch";

TEST(LaunchRestartTest, OnceTheJobSavedACheckpointTheChiefResumesFromTheDirectory) {
  const ChiefRestart r = RestartedChief(
      {"--data", "d", "--restore_from", "/user/ckpt", "--checkpoint_dir", kDir}, kDir, true);
  EXPECT_THAT(r.flags, ElementsAre("--data", "d", "--restarted", "--checkpoint_dir", kDir,
                                   "--restore_from", kDir));
  EXPECT_EQ(r.from, kDir);
  // --resume's directory is the launcher's: the same, whichever form the flag had.
  EXPECT_THAT(RestartedChief({"--resume=/r", "--epochs", "2"}, "/r", true).flags,
              ElementsAre("--epochs", "2", "--restarted", "--checkpoint_dir", "/r",
                          "--restore_from", "/r"));
}

// The probe's case: the chief died before this job saved anything, and the user asked for a
// restore. It must restore what the user asked for, not start a fresh job in an empty directory.
TEST(LaunchRestartTest, BeforeTheFirstCheckpointTheChiefRestoresWhatTheUserAskedFor) {
  ChiefRestart r = RestartedChief(
      {"--restore_from", "/user/ckpt", "--data", "d", "--checkpoint_dir", kDir}, kDir, false);
  EXPECT_THAT(r.flags, ElementsAre("--restore_from", "/user/ckpt", "--data", "d",
                                   "--checkpoint_dir", kDir, "--restarted"));
  EXPECT_THAT(r.from, HasSubstr("--restore_from /user/ckpt"));
  r = RestartedChief({"--restore_from=/user/ckpt", "--restarted"}, kDir, false);
  EXPECT_THAT(r.flags, ElementsAre("--restore_from=/user/ckpt", "--restarted"));
  r = RestartedChief({"--resume", "/r"}, "/r", false);
  EXPECT_THAT(r.flags, ElementsAre("--resume", "/r", "--restarted"));
  EXPECT_THAT(r.from, HasSubstr("--resume /r"));
}

// No restore asked for and none saved: the first chief's flags again, never --resume of a
// directory that may hold another job's checkpoints.
TEST(LaunchRestartTest, AJobFromScratchStartsFromScratchAgain) {
  const ChiefRestart r = RestartedChief({"--data", "d", "--checkpoint_dir", kDir}, kDir, false);
  EXPECT_THAT(r.flags, ElementsAre("--data", "d", "--checkpoint_dir", kDir));
  EXPECT_THAT(r.from, HasSubstr("scratch"));
}

}  // namespace
}  // namespace pstrain
