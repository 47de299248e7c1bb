// The embedding tables of the ParameterServer: creating them (get-or-create) and lookups (with
// their sync and ssp waits); sparse pushes are in ps_sparse_push.cc. Locks and their order: see
// parameter_server.cc.
//
// Keys and rows travel as raw little-endian arrays in bytes fields. They are read in place (a
// copy only if a request's bytes happen not to be aligned for them), and a lookup writes its rows
// straight into the response's bytes field.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/limits.h"
#include "google/protobuf/util/message_differencer.h"
#include "ps/parameter_server_impl.h"

namespace pstrain {

static_assert(std::endian::native == std::endian::little,
              "keys and rows travel as little-endian bytes and are read in place");

namespace {

// What MessageDifferencer reports ("modified: dim: 4 -> 8\n..."), on one line of at most 512
// bytes.
std::string OneLine(absl::string_view differences) {
  std::string line =
      absl::StrJoin(absl::StrSplit(absl::StripTrailingAsciiWhitespace(differences), '\n'), "; ");
  if (line.size() > 512) line = absl::StrCat(line.substr(0, 512), "...");
  return line;
}

}  // namespace

std::string ParameterServerImpl::TableWhere(absl::string_view name) const {
  return absl::StrCat("table ", Quoted(name), " on ", Where());
}

absl::Status ParameterServerImpl::FromTable(absl::string_view name, const absl::Status& s) const {
  absl::string_view message = s.message();
  absl::ConsumePrefix(&message, absl::StrCat("table ", Quoted(name), ": "));
  return absl::Status(s.code(), absl::StrCat(TableWhere(name), ": ", message));
}

absl::StatusOr<TablePtr> ParameterServerImpl::FindTable(absl::string_view name) {
  absl::ReaderMutexLock lock(&tables_mu_);
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("table ", Quoted(name), " not found on ", Where()));
  }
  return it->second;
}

std::vector<std::pair<std::string, TablePtr>> ParameterServerImpl::AllTables() {
  std::vector<std::pair<std::string, TablePtr>> all;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    all.assign(tables_.begin(), tables_.end());
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return all;
}

absl::Status ParameterServerImpl::CreateTables(const CreateTablesRequest& req,
                                               CreateTablesResponse* resp) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  // admin_mu_ serialises every change to tables_, so what is found below stays true.
  absl::MutexLock admin(&admin_mu_);
  if (absl::Status s = CheckChief(req.sender(), "CreateTables"); !s.ok()) return s;
  if (absl::Status s = CheckNames(
          req.tables(), [](const TableDef& d) -> const std::string& { return d.name(); },
          "table create", absl::StatusCode::kAlreadyExists, "table", kMaxTables);
      !s.ok()) {
    return s;
  }
  // Build every new table outside the map's lock; insert all or none under it.
  std::vector<std::pair<std::string, TablePtr>> created;
  try {
    created.reserve(req.tables_size());
    for (const TableDef& def : req.tables()) {
      if (absl::StatusOr<TablePtr> existing = FindTable(def.name()); existing.ok()) {
        std::string differences;
        google::protobuf::util::MessageDifferencer differ;
        differ.ReportDifferencesToString(&differences);
        if (differ.Compare((*existing)->def, def)) continue;
        return absl::AlreadyExistsError(absl::StrCat(TableWhere(def.name()),
                                                     " already exists with another definition (",
                                                     OneLine(differences), ")"));
      }
      absl::StatusOr<std::unique_ptr<EmbeddingTable>> table = EmbeddingTable::Create(def);
      if (!table.ok()) return FromTable(def.name(), table.status());
      created.emplace_back(def.name(), std::make_shared<Table>(def, *std::move(table)));
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not enough memory on ", Where(), " to create the ", req.tables_size(), " tables"));
  }
  absl::WriterMutexLock lock(&tables_mu_);
  if (tables_.size() + created.size() > static_cast<size_t>(kMaxTables)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("creating ", created.size(), " tables on ", Where(), ", which holds ",
                     tables_.size(), ", would pass the limit of ", kMaxTables, " tables per PS"));
  }
  for (auto& [name, table] : created) tables_.emplace(std::move(name), std::move(table));
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::ParseKeys(const std::string& table, const std::string& keys,
                                            absl::string_view what, TableSlice* slice) {
  absl::StatusOr<TablePtr> found = FindTable(table);
  if (!found.ok()) return found.status();
  slice->table = *std::move(found);
  slice->name = &table;
  if (keys.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(TableWhere(table), ": the keys of the ", what,
                                                   " are ", keys.size(),
                                                   " bytes, not whole uint64s of 8 bytes"));
  }
  slice->n = static_cast<int64_t>(keys.size() / sizeof(uint64_t));
  if (slice->n > kMaxKeysPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat(
        TableWhere(table), ": a ", what, " of ", slice->n, " keys is over the limit of ",
        kMaxKeysPerRequest, " keys per table and request; the client must split it"));
  }
  slice->keys = InPlace(keys, &slice->key_copy);
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(slice->n);
  for (int64_t i = 0; i < slice->n; ++i) {
    if (!seen.insert(slice->keys[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat(TableWhere(table), ": key ", slice->keys[i],
                                                     " appears more than once in the ", what));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::ValidateLookup(const LookupRequest& req,
                                                 std::vector<TableSlice>* slices) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckGeneration(req.sender(), "lookup"); !s.ok()) return s;
  if (absl::Status s = CheckChiefOrWorker(req.sender(), "lookup"); !s.ok()) return s;
  if (req.clock() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookup with clock ", req.clock(), ": a clock counts pushes, from 0"));
  }
  if (absl::Status s = CheckNames(
          req.tables(), [](const TableKeys& t) -> const std::string& { return t.table(); },
          "lookup", absl::StatusCode::kInvalidArgument, "table", kMaxTables);
      !s.ok()) {
    return s;
  }
  slices->resize(req.tables_size());
  int64_t total = 0, keys = 0;
  for (int i = 0; i < req.tables_size(); ++i) {
    TableSlice& slice = (*slices)[i];
    if (absl::Status s = ParseKeys(req.tables(i).table(), req.tables(i).keys(), "lookup", &slice);
        !s.ok()) {
      return s;
    }
    // At most kMaxTables * kMaxKeysPerRequest * kMaxTableDim * 4 bytes: cannot overflow.
    const int64_t bytes = slice.n * slice.table->rows->dim() * static_cast<int64_t>(sizeof(float));
    total = CheckedAdd(total, bytes).value_or(std::numeric_limits<int64_t>::max());
    keys += slice.n;
  }
  if (total > kMaxPayloadBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("lookup of ", keys, " keys in ", req.tables_size(), " tables from ", Where(),
                     " would return ", total, " bytes of rows, over the limit of ",
                     kMaxPayloadBytes, " bytes per response; the client must split the lookup"));
  }
  return absl::OkStatus();
}

// Every table at min_version or later, and all at one step, as SyncReady for variables.
bool ParameterServerImpl::TablesReady(const std::vector<TableSlice>& slices, uint64_t min_version) {
  std::optional<uint64_t> step;
  for (const TableSlice& s : slices) {
    const uint64_t v = s.table->version.load();
    if (v < min_version || (step && *step != v)) return false;
    step = v;
  }
  return true;
}

std::string ParameterServerImpl::TablesWaitReason(const std::vector<TableSlice>& slices,
                                                  uint64_t min_version) {
  for (const TableSlice& s : slices) {
    absl::MutexLock lock(&s.table->mu);
    const uint64_t at = s.table->version.load();
    if (at >= min_version) continue;
    const Contributors& have = s.table->contributors;
    return absl::StrCat("step ", min_version, ": ", TableWhere(*s.name), " is at step ", at,
                        "; step ", at + 1, " still lacks gradients from ",
                        consistency_.Lacking(have), " (it has ", have.size(), " of ",
                        consistency_.StepThreshold(have), ")");
  }
  return absl::StrCat("step ", min_version, ": the tables on ", Where(), " to reach the same step");
}

void ParameterServerImpl::LookupAsync(const LookupRequest& req, LookupResponse* resp,
                                      std::function<void(absl::Status)> done) {
  resp->Clear();
  auto slices = std::make_shared<std::vector<TableSlice>>();
  if (absl::Status s = ValidateLookup(req, slices.get()); !s.ok()) return done(s);
  const Mode mode = consistency_.mode();
  const uint64_t min_version = req.min_version();
  const int64_t clock = req.clock();
  const Sender sender = req.sender();
  Consistency::Wait wait;
  // ready and describe are called under the consistency lock and take table locks after it.
  wait.ready = [this, slices, mode, min_version, clock]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (mode == Mode::kSsp) return consistency_.ClockAllows(clock);
    return mode != Mode::kSync || TablesReady(*slices, min_version);
  };
  wait.describe = [this, slices, mode, min_version, clock, sender]()
                      ABSL_NO_THREAD_SAFETY_ANALYSIS -> std::string {
    if (mode == Mode::kSsp) return consistency_.ClockWaitReason(sender, clock);
    return TablesWaitReason(*slices, min_version);
  };
  wait.serve = [this, slices, resp, done = std::move(done)](absl::Status s) {
    if (!s.ok()) return done(s);
    try {
      std::vector<float> unaligned;
      for (const TableSlice& slice : *slices) {
        TableRows* out = resp->add_tables();
        std::string* rows = out->mutable_rows();
        const int64_t floats = slice.n * slice.table->rows->dim();
        rows->resize(floats * sizeof(float));
        float* dst = reinterpret_cast<float*>(rows->data());
        const bool aligned = reinterpret_cast<uintptr_t>(dst) % alignof(float) == 0;
        if (!aligned) {
          unaligned.resize(floats);
          dst = unaligned.data();
        }
        out->set_version(slice.table->rows->Lookup(slice.keys, slice.n, dst));
        if (!aligned) std::memcpy(rows->data(), dst, floats * sizeof(float));
      }
    } catch (const std::bad_alloc&) {
      resp->Clear();
      return done(absl::ResourceExhaustedError(
          absl::StrCat("not enough memory on ", Where(), " to answer a lookup")));
    }
    done(absl::OkStatus());
  };
  consistency_.PullOrWait(sender, clock, std::move(wait));
}

void ParameterServerImpl::FillTableStats(StatsResponse* resp) {
  for (const auto& [name, table] : AllTables()) {
    TableStats* stats = resp->add_tables();
    *stats = table->rows->Stats();
    stats->set_name(name);
  }
}

}  // namespace pstrain
