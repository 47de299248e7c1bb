// Helpers of the checkpoint tests: PS tasks served in the test's process, a restore followed at
// once by a save (0 steps in between), and a tensor-by-tensor comparison of two checkpoints.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "master/checkpoints.h"
#include "master/tables.h"
#include "master/variables.h"
#include "ps/ps.h"

namespace pstrain::testing {

// One PS task on 127.0.0.1, served by real gRPC in this process.
struct ServedPs {
  explicit ServedPs(int task) {
    ps = *ParameterServer::Create({.task = task});
    service = MakeParameterServerService(ps.get(), nullptr);
    int port = 0;
    server = *StartGrpcServer("127.0.0.1:0", {service.get()}, &port);
    address = absl::StrCat("127.0.0.1:", port);
  }
  ~ServedPs() {
    ps->Stop();
    server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  std::unique_ptr<ParameterServer> ps;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

// Restores `ckpt` into `num_ps` fresh PS tasks (the variables with their saved optimizers, the
// tables with their saved definitions) and saves them at once under `out`: the new checkpoint's
// directory.
inline std::string RestoreAndSave(const LoadedCheckpoint& ckpt, int num_ps,
                                  const std::string& out) {
  std::vector<std::unique_ptr<ServedPs>> servers;
  std::vector<std::string> addresses;
  for (int t = 0; t < num_ps; ++t) {
    servers.push_back(std::make_unique<ServedPs>(t));
    addresses.push_back(servers.back()->address);
  }
  std::vector<NewVariable> vars;
  for (const LoadedCheckpoint::Variable& v : ckpt.variables) {
    NewVariable n;
    n.name = v.name;
    n.shape = v.shape;
    EXPECT_TRUE(n.optimizer.ParseFromString(v.optimizer_config)) << v.name;
    vars.push_back(std::move(n));
  }
  std::vector<TableDef> tables;
  for (const TableRecord& t : ckpt.tables) {
    TableDef def;
    EXPECT_TRUE(def.ParseFromString(t.table_def)) << t.name;
    tables.push_back(def);
  }
  auto placer = *VariablePlacer::Create(addresses, "auto", "greedy", absl::Seconds(30));
  TableCreator creator(addresses, absl::Seconds(30));
  std::vector<Placement> placement;
  absl::Status s = RestoreParameters(ckpt, vars, tables, placer.get(), &creator, addresses,
                                     absl::Seconds(30), &placement);
  EXPECT_TRUE(s.ok()) << s;
  CheckpointOptions o;
  o.dir = out;
  auto manager = CheckpointManager::Create(o, addresses);
  EXPECT_TRUE(manager.ok()) << manager.status();
  if (!manager.ok()) return "";
  (*manager)->SetModel(placement, ckpt.signature);
  absl::StatusOr<std::string> saved = (*manager)->SaveAndWait();
  EXPECT_TRUE(saved.ok()) << saved.status();
  return saved.ok() ? *saved : "";
}

inline bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every tensor of `a` and `b` reassembled: values, each slot, versions, update counts, and every
// table row with its slots, step count and last update; bit for bit.
inline void ExpectSameState(const LoadedCheckpoint& a, const LoadedCheckpoint& b) {
  EXPECT_EQ(a.global_step, b.global_step);
  ASSERT_EQ(a.variables.size(), b.variables.size());
  for (size_t i = 0; i < a.variables.size(); ++i) {
    const auto& va = a.variables[i];
    const auto& vb = b.variables[i];
    EXPECT_EQ(va.name, vb.name);
    EXPECT_EQ(va.shape, vb.shape) << va.name;
    EXPECT_TRUE(SameFloats(va.values, vb.values)) << va.name;
    EXPECT_EQ(va.version, vb.version) << va.name;
    EXPECT_EQ(va.update_count, vb.update_count) << va.name;
    ASSERT_EQ(va.slots.size(), vb.slots.size()) << va.name;
    for (size_t j = 0; j < va.slots.size(); ++j) {
      EXPECT_EQ(va.slots[j].name, vb.slots[j].name) << va.name;
      EXPECT_TRUE(SameFloats(va.slots[j].values, vb.slots[j].values))
          << va.name << " slot " << va.slots[j].name;
    }
  }
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (size_t i = 0; i < a.tables.size(); ++i) {
    const TableRecord& ta = a.tables[i];
    const TableRecord& tb = b.tables[i];
    EXPECT_EQ(ta.name, tb.name);
    EXPECT_EQ(ta.version, tb.version) << ta.name;
    ASSERT_EQ(ta.keys.size(), tb.keys.size()) << ta.name;
    ASSERT_EQ(ta.floats_per_row, tb.floats_per_row) << ta.name;
    std::map<uint64_t, size_t> at;
    for (size_t k = 0; k < tb.keys.size(); ++k) at[tb.keys[k]] = k;
    const size_t fpr = static_cast<size_t>(ta.floats_per_row);
    int mismatched = 0;
    for (size_t k = 0; k < ta.keys.size(); ++k) {
      auto it = at.find(ta.keys[k]);
      if (it == at.end()) {
        ++mismatched;
        continue;
      }
      const size_t m = it->second;
      if (std::memcmp(&ta.floats[k * fpr], &tb.floats[m * fpr], fpr * sizeof(float)) != 0 ||
          ta.last_update[k] != tb.last_update[m] ||
          (!ta.step_counts.empty() && ta.step_counts[k] != tb.step_counts[m])) {
        ++mismatched;
      }
    }
    EXPECT_EQ(mismatched, 0) << "table " << ta.name << ": rows that differ";
  }
}

}  // namespace pstrain::testing
