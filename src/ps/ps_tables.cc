// The embedding tables of the ParameterServer: creating them (get-or-create), lookups (with their
// sync and ssp waits), sparse pushes, and the application of their sync steps. Locks and their
// order: see parameter_server.cc.
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

// `bytes` as bytes.size() / sizeof(T) values of T: in place when aligned for T, else copied into
// `copy`.
template <typename T>
const T* InPlace(const std::string& bytes, std::vector<T>* copy) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(T) == 0) {
    return reinterpret_cast<const T*>(bytes.data());
  }
  copy->resize(bytes.size() / sizeof(T));
  std::memcpy(copy->data(), bytes.data(), copy->size() * sizeof(T));
  return copy->data();
}

// `got` bytes of gradient rows, as a message shows them.
std::string FloatCount(size_t got) {
  if (got % sizeof(float) == 0) return absl::StrCat(got / sizeof(float));
  return absl::StrCat(got, " bytes");
}

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

absl::Status ParameterServerImpl::ValidateGradient(const SparseGradient& g, Mode mode, int task,
                                                   uint64_t incarnation, TableSlice* slice) {
  Table* table = slice->table.get();
  const int dim = table->rows->dim();
  const int64_t floats = slice->n * dim;  // at most kMaxKeysPerRequest * kMaxTableDim
  if (g.rows().size() != static_cast<size_t>(floats) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(TableWhere(g.table()), ": ", slice->n,
                                                   " keys need ", slice->n, " x ", dim,
                                                   " floats, got ", FloatCount(g.rows().size())));
  }
  slice->rows = InPlace(g.rows(), &slice->row_copy);
  if (int64_t bad = FirstNonFinite(slice->rows, floats); bad >= 0) {
    consistency_.counters.nonfinite_rejected++;
    return absl::InvalidArgumentError(absl::StrCat(
        TableWhere(g.table()), ": the gradient of key ", slice->keys[bad / dim],
        " has a non-finite value (", slice->rows[bad], ") at index ", bad % dim, " of its row"));
  }
  {
    absl::MutexLock lock(&table->mu);
    const uint64_t version = table->rows->version();
    if (g.read_version() > version) {
      return absl::InvalidArgumentError(
          absl::StrCat(TableWhere(g.table()), ": the gradient was computed from version ",
                       g.read_version(), " but the table is at version ", version));
    }
    if (mode == Mode::kSync && g.read_version() == version) {
      for (const auto& c : table->contributors) {
        if (c == std::make_pair(task, incarnation)) {
          return absl::InvalidArgumentError(absl::StrCat(TableWhere(g.table()), ": worker:", task,
                                                         " already pushed a gradient for step ",
                                                         version));
        }
      }
    }
  }
  if (absl::Status s = table->rows->CheckPush(slice->keys, slice->n); !s.ok()) {
    return FromTable(g.table(), s);
  }
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::PushSparse(const PushSparseRequest& req,
                                             PushSparseResponse* resp) {
  resp->Clear();
  if (absl::Status s = CheckPushRequest(
          req, [](const SparseGradient& g) -> const std::string& { return g.table(); },
          "sparse push", "table", kMaxTables);
      !s.ok()) {
    return s;
  }
  const PushContext ctx = ContextOf(req);

  // Validate everything first. What is checked cannot become invalid before the apply below:
  // dims are fixed, the rows belong to the request, versions only grow, and a key CheckPush
  // accepted keeps its row (a table that may drop rows accepts any key).
  const int n = req.gradients_size();
  std::vector<TableSlice> slices(n);
  for (int i = 0; i < n; ++i) {
    const SparseGradient& g = req.gradients(i);
    if (absl::Status s = ParseKeys(g.table(), g.keys(), "push", &slices[i]); !s.ok()) return s;
    if (absl::Status s = ValidateGradient(g, ctx.mode, ctx.task, ctx.incarnation, &slices[i]);
        !s.ok()) {
      return s;
    }
  }

  consistency_.Rejoin(req.sender());  // a worker paused at a barrier counts again
  ApplyResult any;
  for (int i = 0; i < n; ++i) {
    ApplyResult r;
    resp->add_versions(ApplySparse(slices[i], req.gradients(i).read_version(), ctx, &r));
    if (r.dropped) resp->set_stale_dropped(resp->stale_dropped() + 1);
    any.dropped |= r.dropped;
    any.duplicate |= r.duplicate;
    any.updated |= r.updated;
  }
  CountPush(req.sender(), any);
  return absl::OkStatus();
}

// As ApplyOne, under Table::mu; an untagged async gradient takes only the table's own lock (as
// it always did), a tagged one also Table::mu, so its watermark and its rows change together.
uint64_t ParameterServerImpl::ApplySparse(const TableSlice& slice, uint64_t read_version,
                                          const PushContext& ctx, ApplyResult* result) {
  Table* table = slice.table.get();
  auto apply = [&] {
    const uint64_t version = table->rows->Apply(slice.keys, slice.n, slice.rows);
    table->Publish(version);
    consistency_.counters.pushes_applied++;
    consistency_.counters.updates_applied++;
    result->updated = true;
    return version;
  };
  if (ctx.mode != Mode::kSync && ctx.tag == nullptr) return apply();
  absl::MutexLock lock(&table->mu);
  const bool duplicate = ctx.tag != nullptr && table->applied.IsDuplicate(*ctx.tag);
  if (ctx.mode != Mode::kSync) {
    if (duplicate) {
      result->duplicate = true;
      return table->rows->version();
    }
    const uint64_t version = apply();
    table->applied.Commit(*ctx.tag);
    return version;
  }
  const auto sender = std::make_pair(ctx.task, ctx.incarnation);
  if (read_version < table->rows->version() ||
      std::find(table->contributors.begin(), table->contributors.end(), sender) !=
          table->contributors.end()) {
    if (duplicate) {
      result->duplicate = true;
    } else {
      result->dropped = true;
      if (ctx.tag != nullptr) table->applied.Commit(*ctx.tag);
    }
    return table->rows->version();
  }
  table->contributors.push_back(sender);
  if (duplicate) {
    result->duplicate = true;  // counts towards the step, adds nothing to it
  } else {
    table->rows->Accumulate(slice.keys, slice.n, slice.rows);
    ++table->added;
    if (ctx.tag != nullptr) table->applied.AddToStep(*ctx.tag);
    consistency_.counters.pushes_applied++;
  }
  result->updated = MaybeApplyTableStep(table);
  return table->rows->version();
}

bool ParameterServerImpl::MaybeApplyTableStep(Table* table) {
  const size_t have = table->contributors.size();
  if (have == 0 || have < static_cast<size_t>(consistency_.StepThreshold(table->contributors))) {
    return false;
  }
  // The average of the gradients added; a step of duplicates only (an empty accumulator) still
  // advances the table's version.
  table->Publish(table->rows->ApplyAccumulated(std::max(table->added, 1)));
  if (table->added > 0) consistency_.counters.updates_applied++;
  table->contributors.clear();
  table->added = 0;
  table->applied.CommitStep();
  return true;
}

void ParameterServerImpl::ApplyCompleteTableSteps() {
  for (const auto& [name, table] : AllTables()) {
    absl::MutexLock lock(&table->mu);
    MaybeApplyTableStep(table.get());
  }
}

void ParameterServerImpl::FillTableStats(StatsResponse* resp) {
  for (const auto& [name, table] : AllTables()) {
    TableStats* stats = resp->add_tables();
    *stats = table->rows->Stats();
    stats->set_name(name);
  }
}

}  // namespace pstrain
