// Gradients pushed as float16 or bfloat16 (proto DataType DT_HALF, DT_BFLOAT16): the PS widens
// them to float32 before its checks and the optimizer, from inline data, out-of-line bytes and
// over gRPC; sizes, non-finite values and messages name the dtype; pulls answer DT_FLOAT. The
// expected values are computed by hand from the 16-bit patterns.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_grpc_testing.h"
#include "ps_testing.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using namespace ps_testing;

// Bit patterns: float16 1.0, -2.0, 0.5, 65504 (its largest), 2^-24 (its smallest subnormal).
const std::vector<uint16_t> kHalf = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001};
const std::vector<float> kHalfValues = {1.0f, -2.0f, 0.5f, 65504.0f, 5.9604644775390625e-8f};
// bfloat16 1.0, -2.0, 0.5, 3.0, 2^100 (0x7180: exponent 227 - 127).
const std::vector<uint16_t> kBf16 = {0x3f80, 0xc000, 0x3f00, 0x4040, 0x7180};
const std::vector<float> kBf16Values = {1.0f, -2.0f, 0.5f, 3.0f, 1.2676506002282294e30f};

std::string Bytes(const std::vector<uint16_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2);
}

PushRequest Push16(const std::string& name, DataType dtype, const std::string& data,
                   bool inline_data = true) {
  PushRequest req;
  *req.mutable_sender() = Worker(0);
  Gradient* g = req.add_gradients();
  g->set_name(name);
  g->mutable_gradient()->set_dtype(dtype);
  g->mutable_gradient()->add_shape(5);
  if (inline_data) g->mutable_gradient()->set_data(data);
  return req;
}

std::vector<float> Values(ParameterServer* ps, const std::string& name) {
  PullRequest req;
  *req.mutable_sender() = Chief();
  req.add_names(name);
  PullResponse resp;
  EXPECT_TRUE(ps->Pull(req, &resp).ok());
  const std::string& d = resp.values(0).value().data();
  std::vector<float> out(d.size() / 4);
  std::memcpy(out.data(), d.data(), d.size());
  return out;
}

std::vector<float> Negated(const std::vector<float>& v) {
  std::vector<float> out;
  for (float f : v) out.push_back(-f);
  return out;
}

TEST(PushDtypeTest, HalfAndBfloat16AreWidenedInlineAndOutOfLine) {
  for (bool inline_data : {true, false}) {
    for (DataType dtype : {DT_HALF, DT_BFLOAT16}) {
      SCOPED_TRACE(absl::StrCat(DataType_Name(dtype), inline_data ? " inline" : " out of line"));
      std::unique_ptr<ParameterServer> ps = MakePs();
      Create(ps.get(), "w", Tensor({5}, 0.0f));  // SGD, lr 1: w becomes -g
      const std::string data = Bytes(dtype == DT_HALF ? kHalf : kBf16);
      PushResponse resp;
      absl::Status s;
      if (inline_data) {
        s = ps->Push(Push16("w", dtype, data), &resp);
      } else {
        const ConstBytes out[] = {{data.data(), static_cast<int64_t>(data.size())}};
        s = ps->Push(Push16("w", dtype, data, false), out, &resp);
      }
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_THAT(resp.versions(), ElementsAre(1));
      EXPECT_THAT(Values(ps.get(), "w"),
                  ElementsAreArray(Negated(dtype == DT_HALF ? kHalfValues : kBf16Values)));
    }
  }
}

TEST(PushDtypeTest, SizesAreCheckedAtTwoBytesAndNameTheDtype) {
  std::unique_ptr<ParameterServer> ps = MakePs();
  Create(ps.get(), "w", Tensor({5}, 1.0f));
  PushResponse resp;
  // Float32's byte count is wrong for DT_HALF: 5 elements need 10 bytes.
  const absl::Status s = ps->Push(Push16("w", DT_HALF, std::string(20, '\0')), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("needs 10 bytes of DT_HALF data, got 20"));
  const std::string two(10, '\0');
  const ConstBytes out[] = {{two.data(), 9}};
  const absl::Status t = ps->Push(Push16("w", DT_BFLOAT16, "", false), out, &resp);
  EXPECT_THAT(t.message(), HasSubstr("needs 10 bytes of DT_BFLOAT16 data, got 9"));
  EXPECT_EQ(Read(ps.get(), "w"), (State{0, 1.0f}));
}

TEST(PushDtypeTest, NonFiniteValuesAfterWideningAreRefusedAndCounted) {
  struct Case {
    DataType dtype;
    std::vector<uint16_t> bits;
    std::string value;
  };
  const std::vector<Case> cases = {
      {DT_HALF, {0x3c00, 0x3c00, 0x7c00, 0, 0}, "(inf) at index 2"},  // +infinity
      {DT_HALF, {0x3c00, 0xfe00, 0, 0, 0}, "(nan) at index 1"},       // a NaN
      {DT_BFLOAT16, {0, 0, 0, 0, 0xff80}, "(-inf) at index 4"},       // -infinity
      {DT_BFLOAT16, {0x7fc0, 0, 0, 0, 0}, "(nan) at index 0"},
  };
  std::unique_ptr<ParameterServer> ps = MakePs();
  Create(ps.get(), "w", Tensor({5}, 1.0f));
  for (const Case& c : cases) {
    PushResponse resp;
    const absl::Status s = ps->Push(Push16("w", c.dtype, Bytes(c.bits)), &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("'w' (", DataType_Name(c.dtype), ") has a non-finite")));
    EXPECT_THAT(s.message(), HasSubstr(c.value));
  }
  EXPECT_EQ(Stats(ps.get()).nonfinite_rejected(), 4);
  EXPECT_EQ(Read(ps.get(), "w"), (State{0, 1.0f}));
}

TEST(PushDtypeTest, ASyncStepAveragesHalfAndFloatGradients) {
  const ConfigureRequest config = Config("sync", 2, 2, 0, 10, {Worker(0), Worker(1)});
  std::unique_ptr<ParameterServer> ps = MakePs(&config);
  Create(ps.get(), "w", Tensor({5}, 0.0f));
  PushResponse resp;
  ASSERT_TRUE(ps->Push(Push16("w", DT_HALF, Bytes(kHalf)), &resp).ok());
  Tensor g({5}, 0.0f);
  g.values = {3.0f, 2.0f, 1.5f, 0.0f, 0.0f};
  ASSERT_TRUE(ps->Push(PushReq(Worker(1), "w", g, 0), &resp).ok());
  // w = -(half + float) / 2.
  EXPECT_THAT(Values(ps.get(), "w"),
              ElementsAre(-2.0f, 0.0f, -1.0f, -32752.0f, -kHalfValues[4] / 2));
}

TEST(PushDtypeTest, OverGrpcHalfPushesApplyAndPullsAnswerFloat) {
  GrpcPs server(0);
  ASSERT_TRUE(server
                  .AsChief(&ParameterServerService::Stub::CreateVariables,
                           CreateReq("w", Tensor({5}, 0.0f)))
                  .ok());
  PushResponse resp;
  const absl::Status s = server.Call(&ParameterServerService::Stub::Push,
                                     Push16("w", DT_BFLOAT16, Bytes(kBf16)), &resp);
  ASSERT_TRUE(s.ok()) << s;
  PullRequest pull;
  *pull.mutable_sender() = Worker(0);
  pull.add_names("w");
  PullResponse values;
  ASSERT_TRUE(server.Call(&ParameterServerService::Stub::Pull, pull, &values).ok());
  ASSERT_EQ(values.values_size(), 1);
  EXPECT_EQ(values.values(0).value().dtype(), DT_FLOAT);
  EXPECT_EQ(values.values(0).version(), 1u);
  const std::string& d = values.values(0).value().data();
  ASSERT_EQ(d.size(), 20u);
  std::vector<float> got(5);
  std::memcpy(got.data(), d.data(), d.size());
  EXPECT_THAT(got, ElementsAreArray(Negated(kBf16Values)));
  // A wrong size over gRPC is refused with the dtype named, as in process.
  const absl::Status bad = server.Call(&ParameterServerService::Stub::Push,
                                       Push16("w", DT_HALF, std::string(4, '\0')), &resp);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("DT_HALF"));
}

}  // namespace
}  // namespace pstrain
