// Internal to the embedding-table tests: a table definition and short calls on a table.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/embedding_table.h"

namespace pstrain {
namespace embedding_testing {

inline TableDef Def(const std::string& name, int dim, const std::string& optimizer = "sgd",
                    double lr = 1.0) {
  TableDef def;
  def.set_name(name);
  def.set_dim(dim);
  def.mutable_initializer()->set_kind("uniform");
  def.mutable_initializer()->set_low(-0.5);
  def.mutable_initializer()->set_high(0.5);
  def.mutable_initializer()->set_seed(7);
  def.mutable_optimizer()->set_name(optimizer);
  def.mutable_optimizer()->set_learning_rate(lr);
  return def;
}

inline std::unique_ptr<EmbeddingTable> Make(const TableDef& def) {
  absl::StatusOr<std::unique_ptr<EmbeddingTable>> t = EmbeddingTable::Create(def);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

inline std::vector<float> Lookup(EmbeddingTable& t, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * t.dim(), -999.0f);
  t.Lookup(keys.data(), static_cast<int64_t>(keys.size()), out.data());
  return out;
}

inline void Apply(EmbeddingTable& t, const std::vector<uint64_t>& keys, float g) {
  std::vector<float> grads(keys.size() * t.dim(), g);
  EXPECT_TRUE(t.Apply(keys.data(), static_cast<int64_t>(keys.size()), grads.data()).ok());
}

inline std::vector<float> Initial(const TableDef& def, uint64_t key) {
  std::vector<float> row(def.dim());
  InitialRow(def.initializer(), key, def.dim(), row.data());
  return row;
}

inline std::vector<float> Slice(const std::vector<float>& v, int i, int dim) {
  return std::vector<float>(v.begin() + i * dim, v.begin() + (i + 1) * dim);
}

}  // namespace embedding_testing
}  // namespace pstrain
