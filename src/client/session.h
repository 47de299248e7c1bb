// Public header of src/client for the trainer built into pstrain (src/worker); not installed,
// since it speaks the wire's types (Sender, PushTag, Placement). ParameterSession is the one
// implementation of how a worker reads and writes a model's parameters on the PS: the public
// Client (client.h) is built on it, and so is the built-in trainer. Dense variables travel
// through two sets of connections used in turn (one reads ahead while the values of the other
// are in hand and their gradients are pushed), embedding rows beside them, pushes whole or
// pipelined as a backward pass completes them. What a read waits for (the sync step, the ssp
// clock) and the tag of a push are the caller's (docs/semantics.md, docs/recovery.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "ps.pb.h"
#include "worker.pb.h"

namespace pstrain {

struct ShardRef {
  std::string name;  // the shard's name on its PS
  int ps_task = 0;
  int64_t row_begin = 0, row_end = 0;  // rows of the variable's first axis
};

struct VariableRef {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<ShardRef> shards;  // in row order, covering every row
};

// The shards of placement `p` as a VariableRef for variable `name` of `shape`. InvalidArgument
// unless `p` names that variable and its shards cover its rows in order on ps tasks in
// [0, num_ps).
absl::StatusOr<VariableRef> ToVariableRef(const Placement& p, const std::string& name,
                                          const std::vector<int64_t>& shape, int num_ps);

struct TableRef {
  std::string name;
  int dim = 0;
};

struct SessionOptions {
  std::vector<std::string> ps_addresses;       // by PS task
  Sender sender;                               // on every request
  absl::Duration timeout = absl::Seconds(60);  // the deadline of every call
  CallCanceller* canceller = nullptr;          // not owned, may be null: ends the calls in flight
  DataType push_dtype = DT_FLOAT;  // of the dense gradients (DT_HALF, DT_BFLOAT16: narrowed)
  std::string transport = {};      // of the data channels; empty: the process's
};

// Where a read waits (passed to every PS): `min_version`, the global step (sync); `clock`, this
// worker's ssp clock; `sync`, every value read at one step.
struct ReadAt {
  uint64_t min_version = 0;
  int64_t clock = 0;
  bool sync = false;
};

// Not thread-safe: used by one thread; its calls in flight run on threads of its own.
class ParameterSession {
 public:
  // A call started on one of the session's threads. Its result is read once it is done.
  class Pending {
   public:
    // The call's status once it returned; DeadlineExceeded if it has not by `deadline` (it
    // keeps running: wait again). A call ends by its own deadline, the session's timeout on
    // each request it makes.
    absl::Status Wait(absl::Time deadline);
    bool done() const;
    // Once done, of a push: the shards the PS dropped as stale, and the smallest version its
    // gradients were computed from (the global step in sync mode).
    int stale_dropped() const;
    uint64_t min_version() const;

    struct Rep;
    explicit Pending(std::shared_ptr<Rep> rep);

   private:
    friend class ParameterSession;
    std::shared_ptr<Rep> rep_;
  };

  ParameterSession(SessionOptions options, std::vector<VariableRef> variables,
                   std::vector<TableRef> tables);
  ~ParameterSession();  // waits for the calls in flight
  ParameterSession(const ParameterSession&) = delete;
  ParameterSession& operator=(const ParameterSession&) = delete;

  // New variables or tables (in the order reads and pushes use): their connections are made
  // again, with the sender last set, and the values or rows in hand are dropped. No call may be
  // in flight.
  void SetVariables(std::vector<VariableRef> variables);
  void SetTables(std::vector<TableRef> tables);
  // The sender of the connections made from now on (a new generation: SetVariables and
  // SetTables follow).
  void set_sender(Sender sender) { options_.sender = std::move(sender); }
  const std::vector<VariableRef>& variables() const { return variables_; }
  const std::vector<TableRef>& tables() const { return tables_; }

  // --- a training step, as the built-in trainer takes it ---
  // Pulls every dense variable and looks up keys[t] (distinct keys) of every table t, the two
  // in parallel. On success *values and *rows point at floats valid until the next read. After
  // a Prefetch the dense values are those it pulled (it is waited for here), and only the
  // lookup is made now.
  absl::Status Read(const std::vector<std::vector<uint64_t>>& keys, ReadAt at,
                    std::vector<const float*>* values, std::vector<const float*>* rows);
  // The smallest version the last read returned (the global step in sync mode).
  uint64_t step() const;
  // Pushes the dense gradients and those of the keys of the last Read, tagged with the versions
  // it read. `every_ps` (sync): every PS hears from this worker for every table, so the step can
  // complete. *stale_dropped counts the parts a PS dropped. `tag` (may be null): the batch of
  // the task the gradients come from, on every request.
  absl::Status Write(const std::vector<std::vector<uint64_t>>& keys,
                     const std::vector<Tensor>& dense, const std::vector<std::vector<float>>& rows,
                     bool every_ps, int* stale_dropped, const PushTag* tag = nullptr);
  // A pipelined Write of dense gradients (no tables; async and ssp): queues the push of
  // grads[v] for every v in `vars` (final until FinishPush returns) behind the pushes queued
  // before and returns at once. Each request to a PS carries whole shards of these variables,
  // tagged with the versions of the last read: pushing every variable once this way applies
  // what Write applies.
  void PushSome(const std::vector<int>& vars, const std::vector<Tensor>& grads,
                const PushTag* tag = nullptr);
  // Waits for every push PushSome queued since the last FinishPush: the first error, or OK with
  // *stale_dropped counting the shards the PS dropped.
  absl::Status FinishPush(int* stale_dropped);
  // Starts the dense pull of the next read on the other connections (async and ssp: its values
  // then miss the gradients of the push that follows), while the values of the last read stay
  // in hand and the next push is still tagged with their versions. Ignored while one is in
  // flight.
  void Prefetch(int64_t clock);

  // --- the calls of the public Client, each on its own ---
  // A dense pull. `ahead`: on the other connections and their thread, leaving the values in
  // hand and the versions pushes are tagged with as they are (a pull in flight, or one beside
  // a push in flight); otherwise on the connections pushes go through, on the caller's thread
  // when nothing is queued there. FinishPull makes its values the ones in hand.
  Pending StartPull(ReadAt at, bool ahead);
  // Makes the values of the pull `p` (done and OK) the ones in hand: values(), valid until the
  // next read.
  void FinishPull(const Pending& p);
  // A blocking dense pull on the connections in hand.
  absl::Status Pull(ReadAt at, std::vector<const float*>* values);
  // A push of `grads` (their floats valid until it is done) through the connections whose
  // values are in hand, tagged with their versions; `blocking`: on the caller's thread when
  // nothing is queued there.
  Pending StartPush(std::vector<TensorView> grads, std::optional<PushTag> tag, bool blocking);
  // The values in hand (of the last read), empty before one.
  const std::vector<const float*>& values() const;
  // The dense part of step(): the smallest version of the values in hand.
  uint64_t dense_step() const;
  // A table lookup on its own, and a sparse push (as Write's table part).
  absl::Status Lookup(const std::vector<std::vector<uint64_t>>& keys, ReadAt at,
                      std::vector<const float*>* rows);
  absl::Status PushSparse(const std::vector<std::vector<uint64_t>>& keys,
                          const std::vector<std::vector<float>>& grads, bool every_ps,
                          int* stale_dropped, const PushTag* tag);
  uint64_t table_step() const;

  // Tells every PS this worker is done, or with `pause` that it waits (until its next push).
  // Waits for a prefetch in flight first, and drops it.
  absl::Status Leave(bool pause = false);
  // Counters of every PS task, by task (for the chief: its status page and final report).
  absl::StatusOr<std::vector<StatsResponse>> Stats();
  // Per PS task, the transport its data channel took ("grpc", "tcp" or "ucx"), "" before one.
  std::vector<std::string> data_plane() const;

 private:
  class Engine;
  // Waits for the prefetch in flight and drops it: its status.
  absl::Status DropPrefetch();
  SessionOptions options_;
  std::vector<VariableRef> variables_;
  std::vector<TableRef> tables_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace pstrain
