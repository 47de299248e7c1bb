// Internal to src/client (under ParameterSession; its tests and the benchmarks use it directly):
// lookups and sparse pushes of embedding tables over every PS task. A key lives on PS PsOfKey(key,
// num_ps) (common/keys.h); each call sends one request per PS, carrying every table, all in flight
// at once (more than one per PS only when a table's keys pass kMaxKeysPerRequest or the bytes
// kMaxPayloadBytes). Keys and rows travel as raw little-endian arrays. Not part of the installed
// client API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/session.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "ps.grpc.pb.h"

namespace pstrain {

// How much one Lookup or PushSparse request may carry; a table's keys on one PS are split over
// as many requests as these need. The defaults are the servers' limits (common/limits.h).
struct TableRequestLimits {
  int64_t max_keys = kMaxKeysPerRequest;         // keys of one table in one request
  int64_t max_payload_bytes = kMaxPayloadBytes;  // keys and rows of one request (or its answer)
};

// Not thread-safe: one per training thread.
class TableClient {
 public:
  // `tables` fixes the order used by Lookup and Push.
  TableClient(const std::vector<std::string>& ps_addresses, std::vector<TableRef> tables,
              Sender sender, absl::Duration timeout, TableRequestLimits limits = {});
  ~TableClient();

  // keys[t] holds distinct keys of table t (any order; InvalidArgument naming the table and key
  // for a repeated one, before anything is sent). On success (*rows)[t] holds keys[t].size() *
  // dim floats, the row of keys[t][i] at i * dim. The versions read are remembered for the next
  // Push. `min_version` (sync: wait until every table on every PS reached it) and `clock` (ssp)
  // are passed to every PS, as for PsClient::Pull; with min_version > 0 every PS is asked, even
  // one that holds none of the keys, so the rows all belong to one step. Waits for a PS that is
  // still connecting and resends on UNAVAILABLE within `timeout`.
  absl::Status Lookup(const std::vector<std::vector<uint64_t>>& keys,
                      std::vector<std::vector<float>>* rows, uint64_t min_version = 0,
                      int64_t clock = 0);

  // Pushes gradient rows: grads[t] holds keys[t].size() * dim floats. A key repeated within
  // keys[t] has its rows summed before sending (the PS refuses duplicates). Each table's part on
  // a PS is tagged with the version the last Lookup read there. With `every_ps` (sync mode) or
  // a `tag`, every PS gets a request naming every table, even with no keys, so that every
  // table's step counts this worker's gradient and every table part's task watermark advances
  // with every batch. A table's keys on one PS that need several requests (past
  // the limits) arrive there as several updates. *stale_dropped, if given, counts tables the PS
  // dropped as stale. Untagged, never sent twice. With `tag` every request carries it and one
  // that failed with UNAVAILABLE is sent again (a PS drops a second copy of a tagged batch); a
  // table's keys on one PS must then fit one request (InvalidArgument naming the table and PS
  // otherwise, before anything is sent), since a PS applies one update per table per batch.
  absl::Status Push(const std::vector<std::vector<uint64_t>>& keys,
                    const std::vector<std::vector<float>>& grads, bool every_ps = false,
                    int* stale_dropped = nullptr, const PushTag* tag = nullptr);

  // Smallest version over the tables and PS of the last Lookup (the global step in sync mode).
  uint64_t min_version_read() const;
  const std::vector<TableRef>& tables() const;
  // As PsClient::set_canceller.
  void set_canceller(CallCanceller* canceller);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain
