// Tensor's constructors: shapes and scalars construct without ambiguity.
#include "common/tensor.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(TensorTest, ScalarsHaveNoDimensionsAndOneValue) {
  for (const Tensor& t :
       {Tensor::Scalar(1.5f), Tensor({}, 1.5f), Tensor(std::vector<int64_t>{}, 1.5f)}) {
    EXPECT_TRUE(t.shape.empty());
    ASSERT_EQ(t.size(), 1);
    EXPECT_EQ(t.values[0], 1.5f);
  }
  const Tensor zero({});
  EXPECT_TRUE(zero.shape.empty());
  EXPECT_EQ(zero.values, std::vector<float>{0.0f});
}

TEST(TensorTest, ShapesFromBracesOrVectors) {
  const Tensor a({3, 2}, 1.0f);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a.values, std::vector<float>(6, 1.0f));
  const Tensor b({3});  // a vector of 3 zeros, not a scalar 3
  EXPECT_EQ(b.shape, std::vector<int64_t>{3});
  EXPECT_EQ(b.values, std::vector<float>(3, 0.0f));
  const std::vector<int64_t> shape = {2, 0};
  EXPECT_EQ(Tensor(shape).size(), 0);
  EXPECT_EQ(ShapeString(a.shape), "[3, 2]");
  EXPECT_EQ(ShapeString({}), "[]");
}

}  // namespace
}  // namespace pstrain
