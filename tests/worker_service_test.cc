// The WorkerService obeys only its chief: StartTraining and Shutdown from anyone else are
// refused, a restarted chief (a new incarnation) is obeyed from its first StartTraining, and a
// repeated StartTraining from the chief (a retry) gets the first call's outcome.
#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"
#include "worker.grpc.pb.h"
#include "worker/worker.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

Sender SenderOf(const std::string& job, int task, uint64_t incarnation) {
  Sender s;
  s.set_job(job);
  s.set_task(task);
  s.set_incarnation(incarnation);
  return s;
}

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<int> ports = testing::FreePorts(3);
    WorkerOptions o;
    o.task = 0;
    o.ps_addresses = {absl::StrCat("127.0.0.1:", ports[0])};
    o.chief_address = absl::StrCat("127.0.0.1:", ports[1]);
    absl::StatusOr<std::unique_ptr<Worker>> w =
        Worker::Create(o, [this](const std::string& reason, bool succeeded) {
          shutdowns_++;
          last_reason_ = reason;
          last_succeeded_ = succeeded;
        });
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = *std::move(w);
    const std::string address = absl::StrCat("127.0.0.1:", ports[2]);
    absl::StatusOr<std::unique_ptr<grpc::Server>> server =
        StartGrpcServer(address, {worker_->service()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = WorkerService::NewStub(MakeChannel(address));
  }
  void TearDown() override {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    worker_.reset();
  }

  // StartTraining with a spec that is complete but whose data directory does not exist: the
  // worker checks it and answers with the error.
  grpc::Status StartTraining(const Sender& sender) {
    StartTrainingRequest req;
    *req.mutable_sender() = sender;
    TrainingSpec* spec = req.mutable_spec();
    spec->set_data("/nonexistent/pstrain-data");
    spec->set_train_records(10);
    spec->set_num_shards(1);
    spec->set_batch_size(2);
    spec->set_epochs(1);
    spec->set_report_every(1);
    spec->set_rpc_timeout_s(10);
    spec->set_mode("async");
    spec->mutable_model()->set_kind("mlp");
    spec->mutable_model()->set_dense_features(4);
    spec->mutable_model()->set_num_classes(2);
    // Softmax regression: dense0/kernel [4, 2] and dense0/bias [2], both on ps 0.
    for (const auto& [name, rows] :
         {std::pair<const char*, int>{"dense0/kernel", 4}, {"dense0/bias", 2}}) {
      Placement* p = spec->add_placement();
      p->set_variable(name);
      Shard* shard = p->add_shards();
      shard->set_name(name);
      shard->set_row_end(rows);
    }
    StartTrainingResponse resp;
    return stub_->StartTraining(
        ContextWithTimeout(absl::Seconds(30), /*wait_for_ready=*/true).get(), req, &resp);
  }
  grpc::Status Shutdown(const Sender& sender, bool succeeded) {
    ShutdownRequest req;
    *req.mutable_sender() = sender;
    req.set_reason("job finished");
    req.set_job_succeeded(succeeded);
    ShutdownResponse resp;
    return stub_->Shutdown(ContextWithTimeout(absl::Seconds(30), /*wait_for_ready=*/true).get(),
                           req, &resp);
  }

  std::unique_ptr<Worker> worker_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerService::Stub> stub_;
  std::atomic<int> shutdowns_{0};
  std::string last_reason_;
  bool last_succeeded_ = false;
};

TEST_F(WorkerServiceTest, RepeatedStartTrainingFromTheChiefGetsTheFirstOutcome) {
  worker_->ExpectChief(77);
  const grpc::Status first = StartTraining(SenderOf("chief", 0, 77));
  ASSERT_FALSE(first.ok());
  EXPECT_THAT(first.error_message(), HasSubstr("/nonexistent/pstrain-data"));
  const grpc::Status again = StartTraining(SenderOf("chief", 0, 77));
  EXPECT_EQ(again.error_code(), first.error_code()) << again.error_message();
  EXPECT_EQ(again.error_message(), first.error_message());
}

TEST_F(WorkerServiceTest, StartTrainingOnlyFromItsChief) {
  worker_->ExpectChief(77);
  grpc::Status s = StartTraining(SenderOf("worker", 1, 77));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(),
              HasSubstr("StartTraining from worker:1 refused by worker:0: only the chief"));
  // The refusal started nothing: the chief's own call is the first.
  s = StartTraining(SenderOf("chief", 0, 77));
  EXPECT_THAT(s.error_message(), HasSubstr("/nonexistent/pstrain-data"));
}

// A StartTraining from a new chief incarnation (a restarted chief) is obeyed: it starts a new
// run; from then on the old incarnation is refused, for StartTraining and Shutdown alike.
// A restarted chief is obeyed once registration names it (the Register answer of the real
// chief's address): a StartTraining of another incarnation alone is refused, since anyone can
// claim to be a new chief; the replaced incarnation stays refused.
TEST_F(WorkerServiceTest, ARestartedChiefIsObeyedOnceRegistrationNamesIt) {
  worker_->ExpectChief(77);
  grpc::Status s = StartTraining(SenderOf("chief", 0, 77));
  EXPECT_THAT(s.error_message(), HasSubstr("/nonexistent/pstrain-data"));
  s = StartTraining(SenderOf("chief", 0, 78));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("from chief incarnation 78 refused by worker:0: it "
                                           "obeys chief incarnation 77"));
  worker_->ExpectChief(78);
  s = StartTraining(SenderOf("chief", 0, 78));
  EXPECT_THAT(s.error_message(), HasSubstr("/nonexistent/pstrain-data"));
  s = StartTraining(SenderOf("chief", 0, 77));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = Shutdown(SenderOf("chief", 0, 77), true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(shutdowns_, 0);
  s = Shutdown(SenderOf("chief", 0, 78), true);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(WorkerServiceTest, ShutdownOnlyFromItsChief) {
  worker_->ExpectChief(77);
  grpc::Status s = Shutdown(SenderOf("nobody", 0, 77), true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("Shutdown from nobody:0 refused by worker:0"));
  s = Shutdown(SenderOf("chief", 0, 5), true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(shutdowns_, 0);
  s = Shutdown(SenderOf("chief", 0, 77), false);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(shutdowns_, 1);
  EXPECT_EQ(last_reason_, "job finished");
  EXPECT_FALSE(last_succeeded_);
}

// Before the worker knows its chief from registration, the first chief to call is the one.
TEST_F(WorkerServiceTest, FirstChiefCallPinsTheChiefUntilRegistrationSays) {
  grpc::Status s = StartTraining(SenderOf("chief", 0, 9));
  EXPECT_THAT(s.error_message(), HasSubstr("/nonexistent/pstrain-data"));
  s = Shutdown(SenderOf("chief", 0, 10), true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  worker_->ExpectChief(10);
  s = Shutdown(SenderOf("chief", 0, 10), true);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(last_succeeded_);
}

}  // namespace
}  // namespace pstrain
