// The chief's task ledger on its own: every task of every epoch handed out and applied exactly
// once whatever the workers' speeds, a dead worker's task requeued and redone, stale and
// declared-dead incarnations refused, a restarted process accepted, and the JSON round trip.
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/task_ledger.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);
constexpr absl::Duration kTimeout = absl::Seconds(10);

TaskLedger Make(int64_t rows, int64_t task_rows, int epochs, int workers) {
  absl::StatusOr<TaskLedger> l = TaskLedger::Create({rows, task_rows, epochs, workers}, kTimeout);
  EXPECT_TRUE(l.ok()) << l.status();
  return *std::move(l);
}

TaskReport ReportOf(const TaskRef& t, int64_t batch = 10) {
  return {t.epoch, t.id, (t.end - t.begin + batch - 1) / batch, t.end - t.begin};
}

TEST(TaskLedgerTest, CutsEveryEpochIntoRowRanges) {
  TaskLedger l = Make(1005, 100, 2, 1);
  EXPECT_EQ(l.tasks_per_epoch(), 11);
  EXPECT_EQ(l.total_tasks(), 22);
  ASSERT_TRUE(l.Register(0, 7, kT0).ok());
  std::vector<TaskRef> got;
  for (;;) {
    absl::StatusOr<NextTask> n = l.Next(0, 7, kT0);
    ASSERT_TRUE(n.ok()) << n.status();
    if (n->kind == NextTask::Kind::kFinished) break;
    ASSERT_EQ(n->kind, NextTask::Kind::kTask);
    got.push_back(n->task);
    ASSERT_TRUE(l.Done(0, 7, ReportOf(n->task), kT0).ok());
  }
  ASSERT_EQ(got.size(), 22u);
  EXPECT_EQ(got[0].begin, 0);
  EXPECT_EQ(got[10].begin, 1000);
  EXPECT_EQ(got[10].end, 1005);
  EXPECT_EQ(got[11].epoch, 1);
  EXPECT_EQ(got[11].id, 0);
  EXPECT_EQ(l.CheckExactlyOnce(), "");
}

TEST(TaskLedgerTest, WorkersOfAnySpeedApplyEveryTaskOnce) {
  TaskLedger l = Make(10'000, 64, 3, 3);
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(l.Register(w, 100 + w, kT0).ok());
  std::mt19937 rng(5);
  std::vector<int64_t> done(3, 0);
  std::set<std::pair<int, int64_t>> seen;
  while (!l.Finished()) {
    const int w = std::discrete_distribution<int>({6, 3, 1})(rng);  // worker 0 is the fastest
    absl::StatusOr<NextTask> n = l.Next(w, 100 + w, kT0);
    ASSERT_TRUE(n.ok()) << n.status();
    if (n->kind != NextTask::Kind::kTask) continue;
    ASSERT_TRUE(seen.insert({n->task.epoch, n->task.id}).second);
    ASSERT_TRUE(l.Done(w, 100 + w, ReportOf(n->task), kT0).ok());
    ++done[w];
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), l.total_tasks());
  EXPECT_GT(done[0], 3 * done[2]);  // a fast worker takes more tasks
  EXPECT_EQ(l.CheckExactlyOnce(), "");
  EXPECT_EQ(l.redone(), 0);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(l.Next(w, 100 + w, kT0)->kind, NextTask::Kind::kFinished);
  }
}

TEST(TaskLedgerTest, ARetriedNextOrDoneRepeatsNothing) {
  TaskLedger l = Make(100, 10, 1, 1);
  ASSERT_TRUE(l.Register(0, 1, kT0).ok());
  ASSERT_TRUE(l.Register(0, 1, kT0).ok());  // a retried Register
  const TaskRef t = l.Next(0, 1, kT0)->task;
  EXPECT_EQ(l.Next(0, 1, kT0)->task.id, t.id);  // the answer was lost: the same task
  ASSERT_TRUE(l.Done(0, 1, ReportOf(t), kT0).ok());
  ASSERT_TRUE(l.Done(0, 1, ReportOf(t), kT0).ok());  // a retried Done
  EXPECT_EQ(l.applied(), 1);
  EXPECT_EQ(l.Next(0, 1, kT0)->task.id, t.id + 1);
}

TEST(TaskLedgerTest, ADeadWorkersTaskIsRequeuedAndRedoneOnce) {
  TaskLedger l = Make(100, 10, 1, 2);
  ASSERT_TRUE(l.Register(0, 1, kT0).ok());
  ASSERT_TRUE(l.Register(1, 2, kT0).ok());
  const TaskRef lost = l.Next(0, 1, kT0)->task;
  const TaskRef other = l.Next(1, 2, kT0)->task;
  EXPECT_TRUE(l.CheckDeadlines(kT0 + kTimeout).empty());  // at the deadline: not yet
  ASSERT_TRUE(l.Heartbeat(1, 2, kT0 + absl::Seconds(8)).ok());
  const std::vector<TaskLedger::Death> dead = l.CheckDeadlines(kT0 + absl::Seconds(11));
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].worker, 0);
  ASSERT_TRUE(dead[0].requeued.has_value());
  EXPECT_EQ(dead[0].requeued->id, lost.id);
  EXPECT_EQ(l.deaths(), 1);
  // Worker 1 finishes its task and is given the dead worker's before any fresh one.
  ASSERT_TRUE(l.Done(1, 2, ReportOf(other), kT0 + absl::Seconds(11)).ok());
  const TaskRef again = l.Next(1, 2, kT0 + absl::Seconds(11))->task;
  EXPECT_EQ(again.id, lost.id);
  EXPECT_EQ(l.redone(), 1);
  ASSERT_TRUE(l.Done(1, 2, ReportOf(again), kT0 + absl::Seconds(11)).ok());
  while (!l.Finished()) {
    const TaskRef t = l.Next(1, 2, kT0 + absl::Seconds(12))->task;
    ASSERT_TRUE(l.Done(1, 2, ReportOf(t), kT0 + absl::Seconds(12)).ok());
  }
  EXPECT_EQ(l.CheckExactlyOnce(), "");
  const nlohmann::json j = l.ToJson();
  EXPECT_EQ(j["redone"], 1);
  EXPECT_EQ(j["ledger"][0][lost.id]["handouts"], 2);
  EXPECT_EQ(j["ledger"][0][lost.id]["applications"], 1);
  EXPECT_EQ(j["ledger"][0][lost.id]["worker"], 1);
}

TEST(TaskLedgerTest, ADeclaredDeadIncarnationIsRefusedAndItsRestartAccepted) {
  TaskLedger l = Make(100, 10, 1, 2);
  ASSERT_TRUE(l.Register(0, 1, kT0).ok());
  ASSERT_TRUE(l.Register(1, 2, kT0).ok());
  const TaskRef held = l.Next(0, 1, kT0)->task;
  // While incarnation 1 lives, another process of worker:0 is refused.
  absl::Status s = l.Register(0, 9, kT0 + absl::Seconds(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("alive"));
  ASSERT_TRUE(l.Heartbeat(1, 2, kT0 + absl::Seconds(15)).ok());
  const std::vector<TaskLedger::Death> dead = l.CheckDeadlines(kT0 + absl::Seconds(15));
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].worker, 0);
  for (absl::Status refused :
       {l.Heartbeat(0, 1, kT0 + absl::Seconds(16)), l.Next(0, 1, kT0 + absl::Seconds(16)).status(),
        l.Done(0, 1, ReportOf(held), kT0 + absl::Seconds(16)),
        l.Register(0, 1, kT0 + absl::Seconds(16))}) {
    EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("declared dead at 2027-01-15T08:00:15"));
  }
  EXPECT_EQ(l.applied(), 0);  // the refused Done applied nothing
  // The restarted process registers with a new incarnation and is given work: the requeued task.
  ASSERT_TRUE(l.Register(0, 9, kT0 + absl::Seconds(17)).ok());
  absl::StatusOr<NextTask> n = l.Next(0, 9, kT0 + absl::Seconds(17));
  ASSERT_EQ(n->kind, NextTask::Kind::kTask);
  EXPECT_EQ(n->task.id, held.id);
  EXPECT_TRUE(l.Heartbeat(0, 9, kT0 + absl::Seconds(17)).ok());
}

TEST(TaskLedgerTest, BadRequestsAreRefusedAndChangeNothing) {
  TaskLedger l = Make(100, 10, 2, 2);
  ASSERT_TRUE(l.Register(0, 1, kT0).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(l.Register(2, 1, kT0)));
  EXPECT_TRUE(absl::IsInvalidArgument(l.Register(-1, 1, kT0)));
  EXPECT_TRUE(absl::IsInvalidArgument(l.Register(1, 0, kT0)));
  EXPECT_TRUE(absl::IsFailedPrecondition(l.Next(1, 5, kT0).status()));  // not registered
  EXPECT_TRUE(absl::IsFailedPrecondition(l.Next(0, 2, kT0).status()));  // a stale incarnation
  const TaskRef t = l.Next(0, 1, kT0)->task;
  TaskReport r = ReportOf(t);
  r.epoch = 2;
  EXPECT_THAT(l.Done(0, 1, r, kT0).message(), HasSubstr("epoch 2 is not in [0, 2)"));
  r = ReportOf(t);
  r.id = 10;
  EXPECT_THAT(l.Done(0, 1, r, kT0).message(), HasSubstr("task 10 is not in [0, 10)"));
  r = ReportOf(t);
  r.examples = 11;  // more examples than rows (fewer are fine: a header, a bad line skipped)
  EXPECT_THAT(l.Done(0, 1, r, kT0).message(), HasSubstr("has 10 rows"));
  r = ReportOf(t);
  r.steps = r.examples + 1;  // more steps than examples
  EXPECT_THAT(l.Done(0, 1, r, kT0).message(), HasSubstr("has 10 rows"));
  r = ReportOf(t);
  r.steps = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(l.Done(0, 1, r, kT0)));
  r = ReportOf(t);
  r.id = t.id + 1;  // a task it does not hold
  EXPECT_THAT(l.Done(0, 1, r, kT0).message(), HasSubstr("does not hold task 1 of epoch 0"));
  EXPECT_EQ(l.applied(), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(TaskLedger::Create({0, 10, 1, 1}, kTimeout).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(TaskLedger::Create({10, 0, 1, 1}, kTimeout).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(TaskLedger::Create({10, 1, 0, 1}, kTimeout).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(TaskLedger::Create({10, 1, 1, 0}, kTimeout).status()));
  EXPECT_THAT(TaskLedger::Create({int64_t{1} << 40, 1, 1, 1}, kTimeout).status().message(),
              HasSubstr("raise task_rows"));
}

TEST(TaskLedgerTest, JsonRoundTripKeepsWhatWasAppliedAndRedoesWhatWasInFlight) {
  const LedgerShape shape{95, 10, 2, 2};
  TaskLedger l = Make(95, 10, 2, 2);
  ASSERT_TRUE(l.Register(0, 1, kT0).ok());
  ASSERT_TRUE(l.Register(1, 2, kT0).ok());
  for (int i = 0; i < 7; ++i) {
    const TaskRef t = l.Next(i % 2, 1 + i % 2, kT0)->task;
    ASSERT_TRUE(l.Done(i % 2, 1 + i % 2, ReportOf(t), kT0).ok());
  }
  const TaskRef in_flight = l.Next(0, 1, kT0)->task;
  const nlohmann::json j = l.ToJson();
  absl::StatusOr<TaskLedger> back = TaskLedger::FromJson(j, shape, kTimeout);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->applied(), 7);
  EXPECT_EQ(back->ToJson(), j);
  ASSERT_TRUE(back->Register(0, 5, kT0).ok());
  absl::StatusOr<NextTask> n = back->Next(0, 5, kT0);
  EXPECT_EQ(n->task.id, in_flight.id);  // the cut's in-flight task is redone after a restore
  while (!back->Finished()) {
    ASSERT_TRUE(back->Done(0, 5, ReportOf(n->task), kT0).ok());
    n = back->Next(0, 5, kT0);
  }
  EXPECT_EQ(back->CheckExactlyOnce(), "");

  EXPECT_THAT(TaskLedger::FromJson(j, {95, 5, 2, 2}, kTimeout).status().message(),
              HasSubstr("\"task_rows\" is 10; this job has 5"));
  nlohmann::json bad = j;
  bad["ledger"][1][3].erase("steps");
  EXPECT_THAT(TaskLedger::FromJson(bad, shape, kTimeout).status().message(),
              HasSubstr("task 3 of epoch 1"));
  bad = j;
  bad["ledger"][1].erase(0);
  EXPECT_THAT(TaskLedger::FromJson(bad, shape, kTimeout).status().message(),
              HasSubstr("epoch 1 must list 10 tasks"));
  EXPECT_FALSE(TaskLedger::FromJson(nlohmann::json::array(), shape, kTimeout).ok());
}

TEST(TaskLedgerTest, FailuresRoundTripInTheJsonAndOlderLedgersHaveNone) {
  const LedgerShape shape{100, 10, 1, 2};
  TaskLedger l = Make(100, 10, 1, 2);
  l.set_failures({3, 2, 1});
  nlohmann::json j = l.ToJson();
  EXPECT_EQ(j["failures"]["workers_replaced"], 3);
  absl::StatusOr<TaskLedger> back = TaskLedger::FromJson(j, shape, kTimeout);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->failures().workers_replaced, 3);
  EXPECT_EQ(back->failures().rollbacks, 2);
  EXPECT_EQ(back->failures().chief_restarts, 1);
  EXPECT_EQ(back->ToJson(), j);
  nlohmann::json older = j;
  older.erase("failures");
  back = TaskLedger::FromJson(older, shape, kTimeout);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->failures().rollbacks, 0);
  j["failures"]["rollbacks"] = -1;
  EXPECT_THAT(TaskLedger::FromJson(j, shape, kTimeout).status().message(),
              HasSubstr("\"failures\" field \"rollbacks\" is missing or not a count"));
}

TEST(TaskLedgerTest, ARestartedProcessReplacesALiveOneOnlyWhenAskedTo) {
  TaskLedger l = Make(100, 10, 1, 1);
  ASSERT_TRUE(l.Register(0, 1, kT0).ok());
  const TaskRef held = l.Next(0, 1, kT0)->task;
  EXPECT_THAT(l.Register(0, 2, kT0).message(), HasSubstr("which is alive"));
  ASSERT_TRUE(l.Register(0, 2, kT0, /*replace_live=*/true).ok());
  EXPECT_THAT(l.Next(0, 1, kT0).status().message(),
              HasSubstr("replaced by its restarted process, incarnation 2"));
  EXPECT_EQ(l.Next(0, 2, kT0)->task.id, held.id);  // the old one's task, requeued
  EXPECT_EQ(l.deaths(), 1);
  EXPECT_TRUE(l.DeclaredDead(0, 1));
  // A new ledger keeps the registrations, not the tasks held.
  TaskLedger next = Make(100, 10, 1, 1);
  next.KeepWorkers(l, kT0);
  EXPECT_EQ(next.incarnation(0), 2u);
  EXPECT_TRUE(next.DeclaredDead(0, 1));
  EXPECT_EQ(next.Next(0, 2, kT0)->task.id, 0);
}

}  // namespace
}  // namespace pstrain
