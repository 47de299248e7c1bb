// Internal to src/master: the job's embedding tables, created on every PS task.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps.grpc.pb.h"

namespace pstrain {

// Thread-safe: client programs create tables concurrently.
class TableCreator {
 public:
  TableCreator(const std::vector<std::string>& ps_addresses, absl::Duration rpc_timeout);
  ~TableCreator();

  // Creates `def` on every PS (CreateTables, retried while a PS is unreachable within the
  // timeout), or does nothing if a table of that name exists with the same definition.
  // InvalidArgument naming the field that differs from the existing table's, or the PS's error
  // (e.g. a bad dim or optimizer) naming the task. A table that some PS refused is removed
  // from none (tables cannot be deleted), so the error says which PS hold it.
  absl::Status GetOrCreate(const TableDef& def);
  // Forgets the tables created so far (the PS were Reset, docs/recovery.md).
  void Forget();
  // The tables created so far, in creation order.
  std::vector<TableDef> tables() const;

 private:
  struct Impl;
  Impl* const impl_;
};

// Per-table counters summed over the PS tasks' StatsResponse.tables (versions: the largest;
// payload_bytes_per_row: the same on every task), in the order of first appearance.
std::vector<TableStats> SumTableStats(const std::vector<StatsResponse>& per_ps);

}  // namespace pstrain
