// Internal to src/ps: the ParameterServer implementation, whose methods live in
// parameter_server.cc (roles, configuration, creating and deleting variables), ps_data_path.cc
// (pulls, pushes and sync steps), ps_tables.cc (embedding tables: create, lookup),
// ps_sparse_push.cc (sparse pushes and the tables' sync steps), ps_checkpoint.cc (Checkpoint,
// Import) and ps_recovery.cc (Reset, AppliedTasks).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/limits.h"
#include "ps/consistency.h"
#include "ps/embedding_table.h"
#include "ps/gradient_chunks.h"
#include "ps/memory_release.h"
#include "ps/ps.h"
#include "ps/ps_internal.h"
#include "ps/snapshot.h"
#include "ps/task_watermarks.h"
#include "ps/variable.h"

namespace pstrain {

// `s` with `prefix` before its message.
inline absl::Status WithPrefix(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// InvalidArgument for more than `limit` names, an empty or over-long name, or (with
// `repeated_code`) a name given twice. `what` names the request and `noun` what the names name
// ("variable", "table") in messages.
template <typename Names, typename GetName>
absl::Status CheckNames(const Names& items, GetName name_of, absl::string_view what,
                        absl::StatusCode repeated_code, absl::string_view noun = "variable",
                        int64_t limit = kMaxVariablesPerRequest) {
  if (items.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(what, " names ", items.size(), " ", noun,
                                                   "s, over the limit of ", limit, " per request"));
  }
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(items.size());
  for (int i = 0; i < items.size(); ++i) {
    const std::string& name = name_of(items[i]);
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(noun, " ", i, " of the ", what, " has an empty name"));
    }
    if (name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(noun, " name ", Quoted(name), " in the ", what,
                                                     " is over the limit of ", kMaxNameBytes,
                                                     " bytes"));
    }
    if (!seen.insert(name).second) {
      return absl::Status(repeated_code, absl::StrCat(noun, " ", Quoted(name),
                                                      " appears more than once in the ", what));
    }
  }
  return absl::OkStatus();
}

// `bytes` as bytes.size() / sizeof(T) values of T: in place when aligned for T, else copied into
// `copy`.
template <typename T>
inline const T* InPlace(const std::string& bytes, std::vector<T>* copy) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(T) == 0) {
    return reinterpret_cast<const T*>(bytes.data());
  }
  copy->resize(bytes.size() / sizeof(T));
  std::memcpy(copy->data(), bytes.data(), copy->size() * sizeof(T));
  return copy->data();
}

// One embedding table held by the server: the rows (thread-safe on their own) and, in sync
// mode, who contributed to the step being accumulated. Shared like a Variable, so a request
// keeps the tables it found alive.
struct Table {
  Table(TableDef d, std::unique_ptr<EmbeddingTable> t) : def(std::move(d)), rows(std::move(t)) {}

  const TableDef def;  // as the chief sent it (get-or-create compares it)
  const std::unique_ptr<EmbeddingTable> rows;
  // sync mode: held from a gradient's stale check through its accumulation (and the step it
  // completes), so a step's contributors and its accumulator agree; any mode: held from a tagged
  // push's watermark check through its update, so the watermarks and the rows agree.
  absl::Mutex mu;
  Contributors contributors ABSL_GUARDED_BY(mu);  // as Variable's
  int added ABSL_GUARDED_BY(mu) = 0;              // as Variable's
  TaskWatermarks applied ABSL_GUARDED_BY(mu);
  // rows->version() as of the last update applied, for the waits of lookups, which are checked
  // under Consistency's lock and must not wait there for the table's own lock (held while a
  // large lookup or update runs).
  std::atomic<uint64_t> version{0};
  void Publish(uint64_t v) {
    uint64_t at = version.load();
    while (at < v && !version.compare_exchange_weak(at, v)) {
    }
  }
};
using TablePtr = std::shared_ptr<Table>;

// One table's part of a lookup or sparse push, validated: the keys (and gradient rows) read in
// place from the request, or copied when the request's bytes are not aligned for them.
struct TableSlice {
  TablePtr table;
  const std::string* name = nullptr;  // in the request
  const uint64_t* keys = nullptr;
  int64_t n = 0;
  const float* rows = nullptr;  // push: n * dim gradient floats
  std::vector<uint64_t> key_copy;
  std::vector<float> row_copy;
};

// Who sent one push and how it combines: what applying each of its gradients needs.
struct PushContext {
  Mode mode = Mode::kAsync;
  int task = 0;
  uint64_t incarnation = 0;
  const PushTag* tag = nullptr;  // null for an untagged push
};
// Sync: a second untagged gradient of one worker for one step is refused. A tagged one sent
// again (its answer was lost) is a duplicate instead, dropped when applied.
inline bool OnePerStep(const PushContext& ctx) {
  return ctx.mode == Mode::kSync && ctx.tag == nullptr;
}
// What applying one gradient did: dropped as stale (sync), dropped as a duplicate (a tagged
// batch already applied), and whether the variable or table changed version.
struct ApplyResult {
  bool dropped = false, duplicate = false, updated = false;
  // What any of a request's gradients did.
  void Add(const ApplyResult& r) {
    dropped |= r.dropped;
    duplicate |= r.duplicate;
    updated |= r.updated;
  }
};

// See parameter_server.cc for the locks and their order.
class ParameterServerImpl final : public ParameterServer {
 public:
  explicit ParameterServerImpl(const Options& options)
      : options_(options), checkpoints_(options.task) {}

  void ExpectChief(uint64_t incarnation) override;
  absl::Status Configure(const ConfigureRequest& req, ConfigureResponse* resp) override;
  absl::Status ReplaceWorker(const ReplaceWorkerRequest& req) override;
  absl::Status CreateVariables(const CreateVariablesRequest& req,
                               CreateVariablesResponse* resp) override;
  absl::Status DeleteVariables(const DeleteVariablesRequest& req,
                               DeleteVariablesResponse* resp) override;
  using ParameterServer::PullAsync;
  using ParameterServer::Push;
  void PullAsync(const PullRequest& req, PullResponse* resp, DataHandler::PullSink sink,
                 int64_t max_bytes, std::function<void(absl::Status)> done) override;
  absl::Status Push(const PushRequest& req, absl::Span<const ConstBytes> out_of_line,
                    PushResponse* resp) override;
  absl::Status PushPieces(const PushRequest& req,
                          absl::Span<const absl::Span<const ConstBytes>> out_of_line,
                          PushResponse* resp) override;
  absl::StatusOr<int64_t> VariableBytes(const std::string& name) override;
  absl::Status CreateTables(const CreateTablesRequest& req, CreateTablesResponse* resp) override;
  void LookupAsync(const LookupRequest& req, LookupResponse* resp,
                   std::function<void(absl::Status)> done) override;
  absl::Status PushSparse(const PushSparseRequest& req, PushSparseResponse* resp) override;
  absl::Status Leave(const LeaveRequest& req, LeaveResponse* resp) override;
  absl::Status Stats(const StatsRequest& req, StatsResponse* resp) override;
  void ReadMetrics(StatsResponse* stats, std::vector<VariableState>* variables) override;
  absl::Status CheckShutdown(const ShutdownRequest& req) override;
  void Stop() override { consistency_.Stop(); }
  absl::Status Checkpoint(const CheckpointRequest& req, CheckpointResponse* resp) override;
  absl::Status Import(const ImportRequest& req, ImportResponse* resp) override;
  absl::Status Reset(const ResetRequest& req, ResetResponse* resp) override;
  absl::Status AppliedTasks(const AppliedTasksRequest& req, AppliedTasksResponse* resp) override;
  void SetDataPlane(const DataPlaneResponse& info) override;
  DataPlaneResponse DataPlane() const override;
  void AfterFreeze(std::function<void()> fn) override { checkpoints_.gate()->Run(std::move(fn)); }

 private:
  // PermissionDenied unless `s` is chief:0 with the pinned incarnation; the first chief call
  // pins its incarnation when ExpectChief has not.
  absl::Status CheckChief(const Sender& s, absl::string_view method) ABSL_LOCKS_EXCLUDED(chief_mu_);
  // The chief (as CheckChief), or a worker as Consistency::CheckWorker allows.
  absl::Status CheckChiefOrWorker(const Sender& s, absl::string_view method);
  // The checks every push, dense or sparse, makes before it looks at a gradient: the sender may
  // push, the request carries gradients, and their names (`noun`s, at most `limit`) are distinct.
  template <typename Req, typename GetName>
  absl::Status CheckPushRequest(const Req& req, GetName name_of, absl::string_view what,
                                absl::string_view noun, int64_t limit) {
    if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
    if (absl::Status s = CheckGeneration(req.sender(), what); !s.ok()) return s;
    if (absl::Status s = consistency_.CheckPusher(req.sender()); !s.ok()) return Refused(s);
    const std::string from =
        absl::StrCat(what, " from ", SenderString(req.sender()), " to ", Where());
    if (req.gradients_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(from, " carries no gradient"));
    }
    if (req.has_tag()) {
      if (absl::Status s = TaskWatermarks::CheckTag(req.tag(), from); !s.ok()) return s;
    }
    return CheckNames(req.gradients(), name_of, what, absl::StatusCode::kInvalidArgument, noun,
                      limit);
  }
  // FailedPrecondition for a worker (any sender but the chief) whose Sender.generation is not
  // the one the chief configured (once it configured one): "<what> from worker:1 (...) of
  // generation G refused by ps:N: it runs generation H (the job rolled back)"; PermissionDenied
  // instead for a sender that is not one of the configured workers (outside the cluster).
  absl::Status CheckGeneration(const Sender& s, absl::string_view what) const;
  // Who sent `req` and how its gradients combine.
  template <typename Req>
  PushContext ContextOf(const Req& req) const {
    return {consistency_.mode(), req.sender().task(), req.sender().incarnation(),
            req.has_tag() ? &req.tag() : nullptr};
  }
  // The counters of one push, once each of its gradients was applied (or dropped).
  void CountPush(const Sender& sender, const ApplyResult& any);
  // The checks of a pull before it looks at any variable's values; fills `vars` in request order.
  // `max_bytes`: the most the values may hold together (kMaxPayloadBytes for one message; a
  // pull with a sink is bounded by its transport, which may stream it).
  absl::Status ValidatePull(const PullRequest& req, std::vector<VariablePtr>* vars,
                            int64_t max_bytes);
  // The sync-mode wait of a pull: what it waits for, and what it still lacks.
  bool SyncReady(const std::vector<VariablePtr>& vars, uint64_t min_version);
  std::string SyncWaitReason(const std::vector<VariablePtr>& vars,
                             const std::vector<std::string>& names, uint64_t min_version);
  // Applies one validated gradient under the variable's lock (watermark check included); says
  // in `result` what it did. Returns the variable's version after this gradient, read under the
  // same lock.
  // Push with gradient i's bytes in pieces[i]: out of line, or the message's own data.
  absl::Status PushGradients(const PushRequest& req,
                             absl::Span<const absl::Span<const ConstBytes>> pieces,
                             PushResponse* resp, bool out_of_line = false);
  uint64_t ApplyOne(Variable* var, const Gradient& g, const GradientChunks& grad,
                    const PushContext& ctx, ApplyResult* result);
  uint64_t ApplyLocked(Variable* var, const Gradient& g, const GradientChunks& grad,
                       const PushContext& ctx, ApplyResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(var->mu);
  // Async and ssp: checks every gradient's update (FirstNonFiniteUpdate) and, when none would
  // make a value non-finite, applies them all, each variable locked throughout (InvalidArgument,
  // counted in nonfinite_rejected, and nothing applied otherwise). Appends the versions to
  // `resp` and what was done to `any`.
  absl::Status ApplyAtOnce(const PushRequest& req, absl::Span<const VariablePtr> vars,
                           absl::Span<const GradientChunks> grads, const PushContext& ctx,
                           PushResponse* resp, ApplyResult* any);
  // sync: applies the accumulated step if it has enough gradients; returns whether it did.
  bool MaybeApplyStep(Variable* var) ABSL_EXCLUSIVE_LOCKS_REQUIRED(var->mu);
  // sync: MaybeApplyStep on every variable, after a worker stopped counting.
  void ApplyCompleteSteps() ABSL_LOCKS_EXCLUDED(mu_);

  // Tables (ps_tables.cc).
  // The named table, or NotFound naming it and this task.
  absl::StatusOr<TablePtr> FindTable(absl::string_view name) ABSL_LOCKS_EXCLUDED(tables_mu_);
  // Every table, sorted by name.
  std::vector<std::pair<std::string, TablePtr>> AllTables() ABSL_LOCKS_EXCLUDED(tables_mu_);
  // "table 'name' on ps task N", the start of every table message.
  std::string TableWhere(absl::string_view name) const;
  // `s`, from the EmbeddingTable `name` ("table 'name': ..."), as said by this task ("table
  // 'name' on ps task N: ...").
  absl::Status FromTable(absl::string_view name, const absl::Status& s) const;
  // Finds the table of one request entry and reads its keys into `slice`: whole uint64s, at most
  // kMaxKeysPerRequest, distinct. `what` is "lookup" or "push".
  absl::Status ParseKeys(const std::string& table, const std::string& keys, absl::string_view what,
                         TableSlice* slice);
  // The checks of a lookup before any row is read; fills `slices` in request order.
  absl::Status ValidateLookup(const LookupRequest& req, std::vector<TableSlice>* slices);
  // The checks of one sparse gradient (after ParseKeys) against its table.
  absl::Status ValidateGradient(const SparseGradient& g, bool one_per_step, int task,
                                uint64_t incarnation, TableSlice* slice);
  // sync: every table at min_version or later, all at one step; and what a wait still lacks.
  bool TablesReady(const std::vector<TableSlice>& slices, uint64_t min_version);
  std::string TablesWaitReason(const std::vector<TableSlice>& slices, uint64_t min_version);
  // Applies one validated sparse gradient (async/ssp: at once; sync: into its step's aggregate,
  // or dropped as stale); returns the table's version after it, or the table's refusal of an
  // update that would make a row non-finite (EmbeddingTable::Apply: nothing applied).
  absl::StatusOr<uint64_t> ApplySparse(const TableSlice& slice, uint64_t read_version,
                                       const PushContext& ctx, ApplyResult* result);
  // sync: applies the table's accumulated step if it has enough gradients; returns whether it
  // did.
  bool MaybeApplyTableStep(Table* table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table->mu);
  // sync: MaybeApplyTableStep on every table, after a worker stopped counting.
  void ApplyCompleteTableSteps() ABSL_LOCKS_EXCLUDED(tables_mu_);
  // Stats of every table, sorted by name.
  void FillTableStats(StatsResponse* resp);
  // The named variable, or NotFound naming it and this task.
  absl::StatusOr<VariablePtr> Find(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Where() const { return absl::StrCat("ps task ", options_.task); }
  absl::Status Refused(const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat(s.message(), ", refused on ", Where()));
  }

  // Checkpoints (ps_checkpoint.cc): copies every shard and table into `part` (the push gate
  // closed) and reports their versions in `resp`.
  absl::Status CopyState(const CheckpointRequest& req, PartFile* part, CheckpointResponse* resp);

  const Options options_;
  CheckpointSession checkpoints_;  // the service runs pushes and Leave through its gate
  Consistency consistency_;
  absl::Mutex admin_mu_ ABSL_ACQUIRED_BEFORE(mu_, tables_mu_);
  absl::Mutex chief_mu_;
  std::optional<uint64_t> chief_incarnation_ ABSL_GUARDED_BY(chief_mu_);
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, VariablePtr> vars_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex data_plane_mu_;
  DataPlaneResponse data_plane_ ABSL_GUARDED_BY(data_plane_mu_);
  absl::Mutex tables_mu_;
  absl::flat_hash_map<std::string, TablePtr> tables_ ABSL_GUARDED_BY(tables_mu_);
  // Null unless options_.release_freed_memory; independent of everything above.
  const std::unique_ptr<MemoryReleaser> releaser_ =
      options_.release_freed_memory ? std::make_unique<MemoryReleaser>(MemoryReleaser::Options{})
                                    : nullptr;
};

}  // namespace pstrain
