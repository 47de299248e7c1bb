// The parameter server: variables, embedding tables, their optimizers, and the gRPC service that
// carries them. Public header of src/ps.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/limits.h"
#include "grpcpp/grpcpp.h"
#include "ps.grpc.pb.h"
#include "transport/transport.h"

namespace pstrain {

// Variables and embedding tables held by one PS task, independent of transport. All methods are
// thread-safe and validate the whole request before changing anything: a request that returns an
// error has changed nothing. Pushes to one variable are serialised by that variable's lock, so
// concurrent pushes are never lost; pushes to different variables run in parallel. An embedding
// table serialises its own updates likewise (ps/embedding_table.h).
//
// Every request must name its sender (InvalidArgument otherwise) and is checked against the
// limits of common/limits.h (InvalidArgument, or ResourceExhausted for a response that would be
// too large). Who may call what (PermissionDenied naming the sender and the method otherwise):
// Configure, CreateVariables, DeleteVariables, CreateTables and Shutdown only the chief (job
// "chief", task 0, the pinned incarnation); Push, PushSparse and Leave the workers the chief
// announced (any sender while it announced none); Pull, Lookup and Stats the chief or those
// workers. The chief's incarnation is pinned by ExpectChief, or else by the first call from job
// "chief".
class ParameterServer {
 public:
  struct Options {
    int task = 0;  // this PS's index in the "ps" job, used in messages
    // Return memory the process freed to the OS once more than 64 MiB of it stays resident
    // (a refused large request otherwise leaves the RSS at its peak): a thread that looks
    // every 200 ms and calls malloc_trim (ps/memory_release.h). Each PS object runs its own.
    bool release_freed_memory = true;
  };
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Create(const Options& options);
  virtual ~ParameterServer() = default;

  // The chief of this job is the one with `incarnation` (learned at registration); later calls
  // from another chief incarnation are refused. Overrides a pin made by an earlier call.
  virtual void ExpectChief(uint64_t incarnation) = 0;

  // Creates each variable with its initial value and optimizer, all or none. AlreadyExists if a
  // name is taken (or repeated in the request); InvalidArgument for an empty or over-long name,
  // a bad tensor, an unknown optimizer or bad hyper-parameters; ResourceExhausted if memory runs
  // out.
  virtual absl::Status CreateVariables(const CreateVariablesRequest& req,
                                       CreateVariablesResponse* resp) = 0;
  // Removes the named variables; unknown names are ignored, so a retry is harmless. A pull
  // waiting on a removed variable ends with NotFound; a push already validated against it
  // applies to the removed copy and is lost with it.
  virtual absl::Status DeleteVariables(const DeleteVariablesRequest& req,
                                       DeleteVariablesResponse* resp) = 0;
  // Sets how pushes combine (async, sync k-of-n, ssp), which workers may push and the recovery
  // generation. Only while no variable or table exists (FailedPrecondition after; Reset drops
  // them); a repeated Configure then replaces the last one. Without it the server runs async and
  // accepts any sender. Once req.generation is non-zero, Pull, Push, Lookup, PushSparse and
  // Leave from a worker whose Sender.generation differs are FailedPrecondition naming both
  // generations; the chief's calls are not generation-checked.
  virtual absl::Status Configure(const ConfigureRequest& req, ConfigureResponse* resp) = 0;
  // From the chief only: Consistency::ReplaceWorker.
  virtual absl::Status ReplaceWorker(const ReplaceWorkerRequest& req) = 0;

  // Values and versions of the named variables, in request order. NotFound names an unknown one;
  // InvalidArgument for a name given twice; ResourceExhausted if their bytes pass
  // kMaxPayloadBytes (the client must split the pull). In sync mode the pull waits until every
  // named variable reached req.min_version; in ssp mode it waits while req.clock runs more than
  // `staleness` ahead of the slowest counting worker. `done` is called exactly once, inline or
  // later from another thread; `resp` must stay valid until then. A wait longer than the
  // configured wait timeout ends with DeadlineExceeded saying what it waited for and, in sync
  // mode, which workers' gradients the step still lacks.
  // With a `sink` (the data plane, transport/transport.h), value i's floats are given to
  // sink(i, values, count) under its variable's lock instead of being copied into `resp`, whose
  // values then carry name, version, dtype and shape and no data; a sink's error ends the pull
  // with it. The values may add up to `max_bytes` (ResourceExhausted past it, before anything
  // is copied): kMaxPayloadBytes for one message, kMaxTensorBytes for a transport that streams.
  virtual void PullAsync(const PullRequest& req, PullResponse* resp, DataHandler::PullSink sink,
                         int64_t max_bytes, std::function<void(absl::Status)> done) = 0;
  void PullAsync(const PullRequest& req, PullResponse* resp, DataHandler::PullSink sink,
                 std::function<void(absl::Status)> done) {
    PullAsync(req, resp, std::move(sink), kMaxTensorBytes, std::move(done));
  }
  void PullAsync(const PullRequest& req, PullResponse* resp,
                 std::function<void(absl::Status)> done) {
    PullAsync(req, resp, nullptr, kMaxPayloadBytes, std::move(done));
  }
  // PullAsync, waiting for `done`.
  absl::Status Pull(const PullRequest& req, PullResponse* resp);

  // Applies each gradient with its variable's optimizer and bumps the version. A tagged push
  // (req.tag; InvalidArgument naming the field for a negative one) of a batch below its task's
  // watermark on a variable is a duplicate there: acknowledged, not applied, counted once per
  // push in Stats' duplicates_dropped; otherwise the watermark moves past the batch, with the
  // update (sync: a duplicate counts towards its step's gradients but adds nothing, the step
  // averages those it added, and the watermarks commit when the step applies; a gradient dropped
  // as stale commits its watermark at once). Rejects the whole
  // push (NotFound / InvalidArgument / PermissionDenied / FailedPrecondition) for an unknown
  // variable, no gradient, a shape mismatch, a non-finite value (counted), a repeated name, a
  // read_version newer than the variable, a worker the chief did not announce, or one that left;
  // in async and ssp mode also (InvalidArgument, counted as a non-finite value) when the update
  // of any gradient would make a value or an optimizer slot non-finite: every update of the
  // push is computed first without writing, under all its variables' locks, then applied.
  // In sync mode a gradient is accumulated for the step it was read at; the step applies the
  // average of its gradients once it has min(replicas_to_aggregate, counting workers) of them
  // (a step whose update would make a value or slot non-finite is counted and not applied). A
  // gradient for an older step is dropped and counted (resp->stale_dropped), not an error. A
  // push from a paused worker makes it count again.
  // With `out_of_line` (the data plane), gradient i's bytes are out_of_line[i] and its
  // TensorProto carries dtype and shape and no data (InvalidArgument if it has data too, or if
  // out_of_line does not hold one entry per gradient); the checks are the same.
  virtual absl::Status Push(const PushRequest& req, absl::Span<const ConstBytes> out_of_line,
                            PushResponse* resp) = 0;
  // As Push with out_of_line, gradient i's bytes being the pieces out_of_line[i] in order (a
  // tensor as gRPC received it, in several slices at any alignment). The pieces are checked and
  // applied where they lie, in bounded chunks, so a push needs no copy of its size.
  virtual absl::Status PushPieces(const PushRequest& req,
                                  absl::Span<const absl::Span<const ConstBytes>> out_of_line,
                                  PushResponse* resp) = 0;
  // Bytes of the named variable's values; NotFound naming it otherwise (DataHandler).
  virtual absl::StatusOr<int64_t> VariableBytes(const std::string& name) = 0;
  absl::Status Push(const PushRequest& req, PushResponse* resp) { return Push(req, {}, resp); }

  // Creates each embedding table (proto TableDef), all or none; a table's rows appear when their
  // keys are looked up. Get-or-create: a name that already holds a table with an identical
  // definition is left as it is and counts as created, so a retried create is harmless; another
  // definition under a taken name is AlreadyExists, as is a name repeated in the request.
  // InvalidArgument as EmbeddingTable::Create says (naming the table and the field), and
  // ResourceExhausted past kMaxTables tables on this PS or when memory runs out. Tables and
  // variables have separate names.
  virtual absl::Status CreateTables(const CreateTablesRequest& req, CreateTablesResponse* resp) = 0;

  // The rows of the given keys of each named table (creating rows as the table's admission
  // says), as raw little-endian float32 in resp->tables(i).rows, in request order, with the
  // version each table's rows were read at. NotFound names an unknown table; InvalidArgument for
  // a table named twice, keys that are not whole uint64s, more than kMaxKeysPerRequest keys of a
  // table, or a key given twice for one table (naming table and key); ResourceExhausted if the
  // rows would pass kMaxPayloadBytes. Waits as PullAsync does: in sync mode until every named
  // table reached req.min_version (and all are at one step), in ssp mode while req.clock runs
  // too far ahead. `req` and `resp` must stay valid until `done`, which is called exactly once,
  // inline or later from another thread (the keys are read in place when the rows are served).
  virtual void LookupAsync(const LookupRequest& req, LookupResponse* resp,
                           std::function<void(absl::Status)> done) = 0;
  // LookupAsync, waiting for `done`.
  absl::Status Lookup(const LookupRequest& req, LookupResponse* resp);

  // Applies each table's gradient rows (one per distinct key) with the table's optimizer as one
  // update of that table, which bumps its version; a tagged push is checked against each table's
  // watermarks as Push checks variables'. Rejects the whole push, changing no row, as
  // Push does (unknown table, repeated table, worker not announced or left, non-finite value,
  // counted in nonfinite_rejected; async and ssp: also an update that would make a row
  // non-finite, EmbeddingTable::CheckUpdate) and for keys that are not whole uint64s, more than
  // kMaxKeysPerRequest keys, a key repeated within one table, rows that are not keys x dim
  // floats, a read_version newer than the table, or a key that was never looked up
  // (EmbeddingTable::CheckPush). A gradient with no keys is an update like any other: in async
  // and ssp mode it bumps the version, and in sync mode it counts as one of its step's gradients,
  // so a worker sends every table to every PS each step. In sync mode a table's gradient joins
  // the aggregate of the step it was read at, and the step applies the average over its
  // gradients once it has as many as a dense step needs; a gradient for an older step is dropped
  // and counted (resp->stale_dropped). resp->versions holds each table's version after the push,
  // in request order.
  virtual absl::Status PushSparse(const PushSparseRequest& req, PushSparseResponse* resp) = 0;

  // The worker finished (it no longer counts for ssp clocks and sync steps, and may not push
  // again) or, with req.pause, waits at a barrier (it stops counting until its next push). Steps
  // that now have enough gradients apply, and waiting pulls are re-checked.
  virtual absl::Status Leave(const LeaveRequest& req, LeaveResponse* resp) = 0;
  // Counters since the server started (proto StatsResponse), with one TableStats per table,
  // sorted by name. A table's gradient counts as a variable's does, once per table and push:
  // pushes_applied when applied (async, ssp) or accumulated (sync), updates_applied per optimizer
  // application (each sparse gradient in async and ssp, each completed table step in sync); a
  // sparse push counts in pushes_by_worker, stale_dropped, dropped_by_worker and
  // nonfinite_rejected as a dense push does, and lookups that waited in pulls_waited.
  virtual absl::Status Stats(const StatsRequest& req, StatsResponse* resp) = 0;
  // What the task's own /metrics reads, without Stats's sender check: the counters of Stats
  // and, sorted by name, each variable's version and bytes in memory (values, optimizer slots
  // and a sync step's accumulator).
  struct VariableState {
    std::string name;
    uint64_t version = 0;
    int64_t bytes = 0;
  };
  virtual void ReadMetrics(StatsResponse* stats, std::vector<VariableState>* variables) = 0;
  // OK if `req` may end the job: from the chief, with a reason within kMaxTextBytes. The gRPC
  // service calls it before its ShutdownFn.
  virtual absl::Status CheckShutdown(const ShutdownRequest& req) = 0;
  // One phase of a checkpoint (proto CheckpointRequest; ps/snapshot.h), from the chief only:
  // FREEZE makes pushes wait and copies every shard (all of them listed in req.shards, else
  // FailedPrecondition) and table; RELEASE lets pushes go on and writes the copy in the
  // background; ABORT drops it; WAIT reports the written file or the write's error.
  virtual absl::Status Checkpoint(const CheckpointRequest& req, CheckpointResponse* resp) = 0;
  // Runs `fn` now or, while a checkpoint freezes this PS, once it is released (on a thread of
  // its own, so a frozen PS holds no thread for a push). The gRPC service runs every Push,
  // PushSparse and Leave through it; direct calls of those methods are not held back.
  virtual void AfterFreeze(std::function<void()> fn) = 0;
  // Restores the versions, optimizer slots, task watermarks (replacing those held) and table rows
  // of a checkpoint into variables and tables created before, from the chief only;
  // InvalidArgument or NotFound (naming the variable, table, slot or watermark) changes nothing.
  virtual absl::Status Import(const ImportRequest& req, ImportResponse* resp) = 0;
  // From the chief only (a rollback, docs/recovery.md): drops every variable and table with
  // their task watermarks, the consistency configuration (mode, announced workers, generation)
  // and the sync and ssp state; pulls and lookups waiting end with Aborted, and a push in flight
  // applies to the dropped copy. The PS is then as just started: Configure, CreateVariables,
  // CreateTables and Import work again. The counters of Stats keep counting (pushes_by_worker
  // and dropped_by_worker restart at the next Configure, as at any Configure); the chief's
  // incarnation stays pinned.
  virtual absl::Status Reset(const ResetRequest& req, ResetResponse* resp) = 0;
  // From the chief only: the task watermarks of every shard and table, each sorted by name.
  // What DataPlane answers: the transports this PS serves besides gRPC (set at start by the
  // runtime once they listen). Thread-safe.
  virtual void SetDataPlane(const DataPlaneResponse& info) = 0;
  virtual DataPlaneResponse DataPlane() const = 0;
  virtual absl::Status AppliedTasks(const AppliedTasksRequest& req, AppliedTasksResponse* resp) = 0;
  // Ends every waiting pull and lookup with Unavailable and refuses new waits; called before the
  // server stops so no call is left open.
  virtual void Stop() = 0;
};

// Called once when the chief ends the job: why, and whether the job succeeded.
using ShutdownFn = std::function<void(const std::string& reason, bool job_succeeded)>;

// The gRPC ParameterServerService (callback API) over `ps`, which must outlive it. A Shutdown
// RPC that ps->CheckShutdown accepts calls `on_shutdown` once and returns; the caller stops the
// server.
std::unique_ptr<grpc::Service> MakeParameterServerService(ParameterServer* ps,
                                                          ShutdownFn on_shutdown);

// The data plane's server end over `ps` (which must outlive it): pushes go through
// ps->AfterFreeze as the gRPC service's do.
std::unique_ptr<DataHandler> MakeDataHandler(ParameterServer* ps);

// A PS task's serving side in one piece, assembled the same way for the pstrain command, the
// tests and the benchmarks: the ParameterServer, its gRPC service, and the data plane's server
// end (one DataHandler behind the tensor stream service and, with UCX, a UCX server).
struct PsServerOptions {
  int task = 0;      // index in the "ps" job
  std::string name;  // for messages: "ps:0"
  // "grpc": the gRPC services only. "ucx": also a UCX server for the workers of this host, and
  // an error naming UCX's reason if it cannot start. "auto": UCX when it starts, else one
  // warning and gRPC.
  std::string transport = "grpc";
  // Where the TCP data plane listens: a host (as the task's gRPC server listens on its own
  // loopback address), or every interface when empty.
  std::string listen_host;
  ShutdownFn on_shutdown;  // the service's (may be null)
};

class PsServer {
 public:
  static absl::StatusOr<std::unique_ptr<PsServer>> Create(const PsServerOptions& options);
  // Stops (see Stop). The caller shuts its gRPC server down before destroying this.
  virtual ~PsServer() = default;
  // Owned here; valid until destruction.
  virtual ParameterServer* ps() const = 0;
  // The services to register on the task's gRPC server, owned here.
  virtual std::vector<grpc::Service*> services() const = 0;
  // Ends every waiting call (ParameterServer::Stop) and stops the UCX server. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace pstrain
