// Helpers for the tests of a parameter server's embedding tables: table definitions, keys and rows
// as raw bytes, lookups and sparse pushes.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_testing.h"

namespace pstrain::ps_testing {

inline TableDef TableOf(const std::string& name, int dim, float init = 0.5f, double lr = 1.0) {
  TableDef def;
  def.set_name(name);
  def.set_dim(dim);
  def.mutable_initializer()->set_kind("constant");
  def.mutable_initializer()->set_value(init);
  *def.mutable_optimizer() = Sgd(lr);
  return def;
}

inline absl::Status CreateTables(ParameterServer* ps, const std::vector<TableDef>& defs,
                                 const Sender& from = Chief()) {
  CreateTablesRequest req;
  *req.mutable_sender() = from;
  for (const TableDef& d : defs) *req.add_tables() = d;
  CreateTablesResponse resp;
  return ps->CreateTables(req, &resp);
}

inline std::string KeyBytes(const std::vector<uint64_t>& keys) {
  std::string out(keys.size() * sizeof(uint64_t), '\0');
  if (!keys.empty()) std::memcpy(out.data(), keys.data(), out.size());
  return out;
}
inline std::string FloatBytes(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}
inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

inline LookupRequest LookupReq(const Sender& from,
                               const std::vector<std::pair<std::string, std::string>>& tables,
                               uint64_t min_version = 0, int64_t clock = 0) {
  LookupRequest req;
  *req.mutable_sender() = from;
  for (const auto& [name, keys] : tables) {
    TableKeys* t = req.add_tables();
    t->set_table(name);
    t->set_keys(keys);
  }
  req.set_min_version(min_version);
  req.set_clock(clock);
  return req;
}

// The rows of `keys` in `table`, looked up as the chief; empty on an error.
inline std::vector<float> Rows(ParameterServer* ps, const std::string& table,
                               const std::vector<uint64_t>& keys, uint64_t* version = nullptr) {
  LookupResponse resp;
  absl::Status s = ps->Lookup(LookupReq(Chief(), {{table, KeyBytes(keys)}}), &resp);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  if (version) *version = resp.tables(0).version();
  return Floats(resp.tables(0).rows());
}

inline SparseGradient Grad(const std::string& table, const std::vector<uint64_t>& keys,
                           const std::vector<float>& rows, uint64_t read_version) {
  SparseGradient g;
  g.set_table(table);
  g.set_keys(KeyBytes(keys));
  g.set_rows(FloatBytes(rows));
  g.set_read_version(read_version);
  return g;
}

inline PushSparseRequest PushSparseReq(const Sender& from, const std::vector<SparseGradient>& gs) {
  PushSparseRequest req;
  *req.mutable_sender() = from;
  for (const SparseGradient& g : gs) *req.add_gradients() = g;
  return req;
}

inline absl::Status PushSparse(ParameterServer* ps, const Sender& from,
                               const std::vector<SparseGradient>& gs,
                               PushSparseResponse* resp = nullptr) {
  PushSparseResponse unused;
  return ps->PushSparse(PushSparseReq(from, gs), resp ? resp : &unused);
}

// A lookup in flight.
struct AsyncLookup {
  LookupRequest req;
  LookupResponse resp;
  absl::Status status;
  std::atomic<bool> finished{false};
  AsyncLookup(ParameterServer* ps, LookupRequest r) : req(std::move(r)) {
    ps->LookupAsync(req, &resp, [this](absl::Status s) {
      status = std::move(s);
      finished = true;
    });
  }
  bool done() const { return finished.load(); }
  std::vector<float> rows(int i = 0) const { return Floats(resp.tables(i).rows()); }
};

}  // namespace pstrain::ps_testing
