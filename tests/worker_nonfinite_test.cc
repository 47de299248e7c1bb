// The trainer's check of a step's gradients before they are pushed: a NaN or Inf in a dense
// gradient names the variable and index, in a table's gradient rows the table and key.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "worker/step_push.h"

namespace pstrain {
namespace {

TEST(NonFiniteTest, NamesTheVariableOrTheTableAndKey) {
  const std::vector<ParamSpec> params = {{"wide/bias", {1}}, {"deep/kernel", {2, 2}}};
  const std::vector<TableSpec> tables = {{"wide", 1, {}, {}}, {"embedding/C1", 2, {}, {}}};
  const std::vector<std::vector<uint64_t>> keys = {{5, 9}, {7, 11, 13}};
  ModelGrads g;
  g.params = {Tensor({1}, 0.5f), Tensor({2, 2}, 0.0f)};
  g.rows = {{0.1f, 0.2f}, std::vector<float>(6, 0.0f)};
  EXPECT_EQ(NonFinite(g, params, tables, keys), "");

  g.rows[1][3] = std::numeric_limits<float>::infinity();  // key 11, second value
  EXPECT_EQ(NonFinite(g, params, tables, keys),
            "gradient for table 'embedding/C1' has inf at key 11");
  g.params[1].values[2] = std::nanf("");
  EXPECT_EQ(NonFinite(g, params, tables, keys),
            "gradient for variable 'deep/kernel' has nan at index 2");
}

}  // namespace
}  // namespace pstrain
