// A push whose gradient arrives in pieces (as gRPC cuts a large message into slices, at any
// alignment) is applied bit for bit as the same gradient in one piece, for an optimizer with
// slots, clipping and 16-bit data; a non-finite value in its last piece rejects it with nothing
// applied, on any variable of the request.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_testing.h"

namespace pstrain {
namespace {

constexpr int64_t kFloats = 50000;  // several bounce buffers' worth

std::unique_ptr<ParameterServer> AdamPs() {
  std::unique_ptr<ParameterServer> ps = ps_testing::MakePs();
  for (const char* name : {"a", "b"}) {
    CreateVariablesRequest req = ps_testing::CreateReq(name, Tensor({kFloats}, 0.5f));
    OptimizerConfig* o = req.mutable_variables(0)->mutable_optimizer();
    o->set_name("adam");
    o->set_learning_rate(0.01);
    o->set_clip_norm(1.0);
    CreateVariablesResponse resp;
    EXPECT_TRUE(ps->CreateVariables(req, &resp).ok());
  }
  return ps;
}

std::vector<float> Values(ParameterServer* ps, const std::string& name) {
  PullRequest req;
  *req.mutable_sender() = ps_testing::Chief();
  req.add_names(name);
  PullResponse resp;
  EXPECT_TRUE(ps->Pull(req, &resp).ok());
  std::vector<float> out(kFloats);
  std::memcpy(out.data(), resp.values(0).value().data().data(), kFloats * 4);
  return out;
}

PushRequest Head(const std::vector<std::string>& names, DataType dtype) {
  PushRequest req;
  *req.mutable_sender() = ps_testing::Worker(0);
  for (const std::string& n : names) {
    Gradient* g = req.add_gradients();
    g->set_name(n);
    g->mutable_gradient()->set_dtype(dtype);
    g->mutable_gradient()->add_shape(kFloats);
  }
  return req;
}

// `bytes` cut into pieces of uneven sizes, each copied to an odd address.
struct Pieces {
  explicit Pieces(const std::string& bytes) {
    const size_t sizes[] = {1, 4093, 7, 65537, 3};
    storage.resize(bytes.size() + 64 * 1024);
    size_t at = 0, out = 1, k = 0;
    while (at < bytes.size()) {
      const size_t n = std::min(sizes[k++ % 5], bytes.size() - at);
      std::memcpy(&storage[out], bytes.data() + at, n);
      pieces.push_back({&storage[out], static_cast<int64_t>(n)});
      at += n;
      out += n + 1 + (k % 3);  // the next piece at another alignment
    }
  }
  std::vector<char> storage;
  std::vector<ConstBytes> pieces;
};

std::string GradientBytes(DataType dtype) {
  std::vector<float> g(kFloats);
  for (int64_t i = 0; i < kFloats; ++i) g[i] = std::sin(static_cast<float>(i)) * 0.01f;
  if (dtype == DT_FLOAT) return std::string(reinterpret_cast<const char*>(g.data()), kFloats * 4);
  std::vector<uint16_t> h(kFloats);
  FloatToHalf(g.data(), h.data(), kFloats);
  return std::string(reinterpret_cast<const char*>(h.data()), kFloats * 2);
}

TEST(PushPiecesTest, PiecesApplyAsOnePiece) {
  for (DataType dtype : {DT_FLOAT, DT_HALF}) {
    SCOPED_TRACE(DataType_Name(dtype));
    const std::string bytes = GradientBytes(dtype);
    std::unique_ptr<ParameterServer> whole = AdamPs(), cut = AdamPs();
    for (int step = 0; step < 2; ++step) {
      PushResponse resp;
      const ConstBytes one{bytes.data(), static_cast<int64_t>(bytes.size())};
      ASSERT_TRUE(whole->Push(Head({"a"}, dtype), absl::MakeConstSpan(&one, 1), &resp).ok());
      const Pieces p(bytes);
      const absl::Span<const ConstBytes> spans[] = {p.pieces};
      absl::Status s = cut->PushPieces(Head({"a"}, dtype), spans, &resp);
      ASSERT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(Values(whole.get(), "a"), Values(cut.get(), "a"));
    EXPECT_NE(Values(whole.get(), "a")[1], 0.5f);
  }
}

TEST(PushPiecesTest, ANonFiniteValueInTheLastPieceAppliesNothing) {
  std::unique_ptr<ParameterServer> ps = AdamPs();
  const std::string good = GradientBytes(DT_FLOAT);
  std::string bad = good;
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(&bad[(kFloats - 1) * 4], &inf, 4);
  const Pieces a(good), b(bad);
  ASSERT_GT(b.pieces.size(), 10u);
  const absl::Span<const ConstBytes> spans[] = {a.pieces, b.pieces};
  PushResponse resp;
  const absl::Status s = ps->PushPieces(Head({"a", "b"}, DT_FLOAT), spans, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("non-finite value (inf) at index 49999"), std::string::npos) << s;
  EXPECT_EQ(Values(ps.get(), "a"), std::vector<float>(kFloats, 0.5f));  // not even "a"
  EXPECT_EQ(Values(ps.get(), "b"), std::vector<float>(kFloats, 0.5f));
  EXPECT_EQ(ps_testing::Read(ps.get(), "a").version, 0u);
}

}  // namespace
}  // namespace pstrain
