// Requests past the documented limits (common/limits.h) or with sizes that overflow: each is
// refused with a status that says what is wrong, before any work, and changes nothing.

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_testing.h"

namespace pstrain {
namespace {

using namespace ps_testing;  // NOLINT
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TensorProto Proto(std::vector<int64_t> shape, size_t bytes, DataType dtype = DT_FLOAT) {
  TensorProto p;
  p.set_dtype(dtype);
  p.mutable_shape()->Assign(shape.begin(), shape.end());
  p.mutable_data()->resize(bytes);
  return p;
}

TEST(TensorCodecTest, ShapesThatOverflowOrPassTheLimitsAreInvalid) {
  struct Case {
    std::string label;
    TensorProto proto;
    std::vector<std::string> parts;
  };
  std::vector<int64_t> rank33(33, 1);
  const std::vector<Case> cases = {
      {"element count overflows",
       Proto({int64_t{1} << 32, int64_t{1} << 32}, 0),
       {"[4294967296, 4294967296]", "overflows", "element count"}},
      {"element count wraps to 1", Proto({274177, 67280421310721}, 4), {"overflows"}},
      {"byte count overflows", Proto({int64_t{1} << 62}, 0), {"overflows", "bytes"}},
      {"over the tensor limit",
       Proto({int64_t{1} << 40}, 0),
       {"4398046511104 bytes", "over the limit of"}},
      {"rank over the limit", Proto(rank33, 4), {"rank 33", "limit of 32"}},
      {"negative dimension", Proto({2, -1}, 0), {"[2, -1]", "negative dimension"}},
      {"unknown dtype",
       Proto({1}, 4, static_cast<DataType>(7)),
       {"tensor dtype 7 is not a known DataType; only DT_FLOAT is supported"}},
      {"known but unsupported dtype", Proto({1}, 4, DT_INVALID), {"DT_INVALID"}},
      {"wrong byte count", Proto({3}, 8), {"[3]", "needs 12 bytes", "got 8"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<Tensor> t = DecodeTensor(c.proto);
    ASSERT_EQ(t.status().code(), kInvalid) << t.status();
    for (const std::string& part : c.parts) EXPECT_THAT(t.status().message(), HasSubstr(part));
    EXPECT_THAT(t.status().message(), testing::Not(HasSubstr("needs 0 bytes")));

    // The same tensor as a variable's initial value and as a gradient: refused, nothing created.
    std::unique_ptr<ParameterServer> ps = MakePs();
    Create(ps.get(), "w", Tensor({4}, 1.0f));
    CreateVariablesRequest create = CreateReq("bad", Tensor({1}));
    *create.mutable_variables(0)->mutable_initial_value() = c.proto;
    CreateVariablesResponse created;
    absl::Status s = ps->CreateVariables(create, &created);
    EXPECT_EQ(s.code(), kInvalid) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("'bad'"), HasSubstr(c.parts[0])));
    PushRequest push = PushReq(Worker(0), "w", Tensor({4}), 0);
    *push.mutable_gradients(0)->mutable_gradient() = c.proto;
    PushResponse pushed;
    s = ps->Push(push, &pushed);
    EXPECT_EQ(s.code(), kInvalid) << s;
    EXPECT_THAT(s.message(), HasSubstr("'w'"));
    EXPECT_EQ(Read(ps.get(), "w"), (State{0, 1.0f}));
    PullRequest pull;
    *pull.mutable_sender() = Chief();
    pull.add_names("bad");
    PullResponse resp;
    EXPECT_EQ(ps->Pull(pull, &resp).code(), absl::StatusCode::kNotFound);
  }
}

TEST(PsLimitsTest, PullIsRefusedForTooManyOrRepeatedNames) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  Create(ps.get(), "w", Tensor({4}, 1.0f));
  PullRequest req;
  *req.mutable_sender() = Worker(0);
  for (int i = 0; i <= kMaxVariablesPerRequest; ++i) req.add_names("w");
  PullResponse resp;
  absl::Status s = ps->Pull(req, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("65537 variables"), HasSubstr("limit of 65536")));

  req.clear_names();
  req.add_names("w");
  req.add_names("w");
  s = ps->Pull(req, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("variable 'w' appears more than once in the pull"));
  EXPECT_EQ(resp.values_size(), 0);

  req.clear_names();
  req.add_names(std::string(kMaxNameBytes + 1, 'n'));
  s = ps->Pull(req, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("(1025 bytes)"), HasSubstr("limit of 1024 bytes")));
  EXPECT_LT(s.message().size(), 300u) << "a message does not echo a long name whole";
}

TEST(PsLimitsTest, PushIsRefusedWhenEmptyOrRepeatedAndNotCounted) {
  const ConfigureRequest config = Config("async", 2, 0, 0, 10, {});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({4}, 1.0f));
  PushRequest empty;
  *empty.mutable_sender() = Worker(1);
  PushResponse resp;
  absl::Status s = ps->Push(empty, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("worker:1"), HasSubstr("carries no gradient")));

  PushRequest many = PushReq(Worker(1), "w", Tensor({4}), 0);
  for (int i = 0; i < kMaxVariablesPerRequest; ++i) *many.add_gradients() = many.gradients(0);
  s = ps->Push(many, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("limit of 65536"));

  EXPECT_EQ(Stats(ps.get()).pushes_by_worker(1), 0);
  EXPECT_EQ(Read(ps.get(), "w"), (State{0, 1.0f}));
  ASSERT_TRUE(Push(ps.get(), Worker(1), "w", 1.0f, 0).ok());
  EXPECT_EQ(Stats(ps.get()).pushes_by_worker(1), 1);
}

TEST(PsLimitsTest, CreateIsRefusedForTooManyVariablesOrLongNames) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  CreateVariablesRequest req = CreateReq("v0", Tensor({1}));
  for (int i = 1; i <= kMaxVariablesPerRequest; ++i) {
    *req.add_variables() = req.variables(0);
    req.mutable_variables(i)->set_name("v" + std::to_string(i));
  }
  CreateVariablesResponse resp;
  absl::Status s = ps->CreateVariables(req, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("limit of 65536"));

  req = CreateReq(std::string(5000, 'x'), Tensor({1}));
  s = ps->CreateVariables(req, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("(5000 bytes)"), HasSubstr("limit of 1024")));

  req = CreateReq("w", Tensor({1}));
  req.mutable_variables(0)->mutable_optimizer()->set_name(std::string(100000, 'o'));
  s = ps->CreateVariables(req, &resp);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("is not a known optimizer"));
  EXPECT_LT(s.message().size(), 2000u);
  PullRequest pull;
  *pull.mutable_sender() = Chief();
  pull.add_names("v0");
  pull.add_names("w");
  PullResponse pulled;
  EXPECT_EQ(ps->Pull(pull, &pulled).code(), absl::StatusCode::kNotFound);
}

TEST(PsLimitsTest, ConfigureChecksEveryRangeAndTheAnnouncedWorkers) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::string label;
    ConfigureRequest req;
    std::string message;
  };
  std::vector<Case> cases = {
      {"huge num_workers", Config("async", std::numeric_limits<int32_t>::max(), 0, 0, 10, {}),
       "num_workers 2147483647 must be in [1, 4096]"},
      {"nan timeout", Config("sync", 2, 2, 0, nan, {}), "must be finite and non-negative"},
      {"infinite timeout", Config("sync", 2, 2, 0, inf, {}), "must be finite and non-negative"},
      {"negative timeout", Config("sync", 2, 2, 0, -1, {}), "must be finite and non-negative"},
      {"worker twice", Config("sync", 2, 2, 0, 10, {Worker(1, 5), Worker(1, 6)}),
       "worker:1 appears more than once"},
      {"not a worker", Config("sync", 2, 2, 0, 10, {From("ps", 0, 5)}),
       "announced worker ps:0 (incarnation 5) is not one of the 2 workers"},
      {"task out of range", Config("sync", 2, 2, 0, 10, {Worker(2, 5)}),
       "announced worker worker:2 (incarnation 5) is not one of the 2 workers"},
      {"more announced than workers", Config("async", 1, 0, 0, 10, {Worker(0, 5), Worker(0, 6)}),
       "2 workers announced, but num_workers is 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    std::unique_ptr<ParameterServer> ps = MakePs();
    ConfigureResponse resp;
    absl::Status s = ps->Configure(c.req, &resp);
    EXPECT_EQ(s.code(), kInvalid) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(c.message), HasSubstr("ps task 0")));
    // Nothing was configured: any worker may still push, and it applies at once (async).
    Create(ps.get(), "w", Tensor({4}, 0.0f));
    EXPECT_TRUE(Push(ps.get(), Worker(7, 9), "w", 1.0f, 0).ok());
    EXPECT_EQ(Read(ps.get(), "w").version, 1u);
  }
}

}  // namespace
}  // namespace pstrain
