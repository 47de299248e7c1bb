// Internal to src/master: the chief's checkpoints (docs/checkpoints.md). A checkpoint is the
// directory <dir>/ckpt-<global_step>/ with one part file per PS (common/checkpoint_format.h) and
// manifest.json, written last: only a directory with a manifest whose files match it is a
// checkpoint. The chief cuts all PS at one point (freeze, copy, release) and waits for their
// writes in the background; restoring reads every part and creates the variables and tables on
// today's PS, whatever their number.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint_format.h"
#include "common/checkpoint_load.h"
#include "master/master.h"
#include "master/tables.h"
#include "master/variables.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "ps.grpc.pb.h"
#include "worker.pb.h"

namespace pstrain {

struct CheckpointOptions {
  std::string dir;          // the checkpoint root; "" = no checkpoints
  int64_t every_steps = 0;  // 0 = not by steps
  double every_secs = 0;    // 0 = not by time
  int keep = 3;             // the newest checkpoints kept
  bool sync_mode = false;   // cut between steps: every shard and table at one version
  absl::Duration rpc_timeout = absl::Seconds(30);
};

// The signature of a built-in model: its variables and tables, in its order.
ModelSignature SignatureOf(const Model& model);

// Thread-safe. Holds an exclusive lock on <dir>/LOCK (flock) from Create to destruction.
class CheckpointManager {
 public:
  // FailedPrecondition naming the lock file when another process holds it (two chiefs on one
  // directory); PermissionDenied when the directory cannot be created or the lock not taken.
  static absl::StatusOr<std::unique_ptr<CheckpointManager>> Create(
      const CheckpointOptions& options, const std::vector<std::string>& ps_addresses);
  ~CheckpointManager();  // waits for a write in progress

  // What is saved: every shard as placed, and the model's signature (for the manifest).
  void SetModel(std::vector<Placement> placement, ModelSignature signature);
  // A client program's variable or table, created after the others: saved from the next cut on.
  void AddVariable(Placement placement, std::vector<int64_t> shape);
  void AddTable(const std::string& name, int dim);
  // The global step restored from (so the first periodic save counts from it).
  void SetRestoredStep(int64_t step);
  // Called while every PS is frozen at a cut: the chief's ledger at that cut
  // (Coordinator::LedgerJson), written into the manifest as "ledger". Unset: no ledger.
  void SetLedgerSource(std::function<nlohmann::json()> ledger_at_cut) ABSL_LOCKS_EXCLUDED(mu_);

  // Saves if --checkpoint_every_steps or --checkpoint_every_secs says one is due at
  // `global_step` and no write is in progress. Never fails: a failed checkpoint is logged,
  // saying that the previous one is intact.
  void MaybeSave(int64_t global_step);
  // Saves now (unless the last checkpoint is of this very state) and waits until the checkpoint
  // exists: its path, or why it does not (the previous checkpoint then stays intact).
  absl::StatusOr<std::string> SaveAndWait();

  // Times of the last cut: the longest a push waited (from the first freeze to the last
  // release), and the bytes the PS copied.
  absl::Duration last_pause() const;
  int64_t last_snapshot_bytes() const;

 private:
  struct Cut;
  CheckpointManager(const CheckpointOptions& options, const std::vector<std::string>& ps_addresses,
                    int lock_fd);
  // Freezes every PS, checks the versions (sync: all equal, else retries), releases them: the
  // checkpoint's step and directory, or an error (every PS released).
  absl::StatusOr<Cut> TakeCut();
  // The PS are in the state of the checkpoint `previous` (the same step and state stamps): its
  // manifest gets the cut's ledger if that differs (the ledger went on without a push, as the
  // last TaskDone does).
  void UpdateLedger(const std::string& previous, const Cut& cut);
  // Waits for the writes of `cut`, writes the manifest, removes old checkpoints.
  absl::Status Finish(const Cut& cut);
  // TakeCut, then Finish in the background (`wait`: in this thread).
  absl::StatusOr<std::string> Save(bool wait) ABSL_LOCKS_EXCLUDED(mu_);
  void JoinWriter();

  const CheckpointOptions options_;
  const int lock_fd_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> ps_;
  absl::Mutex save_mu_;  // one save at a time
  mutable absl::Mutex mu_;
  std::vector<Placement> placement_ ABSL_GUARDED_BY(mu_);
  ModelSignature signature_ ABSL_GUARDED_BY(mu_);
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = -1;  // of the last checkpoint saved or restored
  // Its cut's state stamps per PS; empty after a restore.
  std::vector<std::pair<uint64_t, int64_t>> last_stamps_ ABSL_GUARDED_BY(mu_);
  int64_t last_trigger_step_ ABSL_GUARDED_BY(mu_) = 0;  // the job's step at the last save
  std::string last_path_ ABSL_GUARDED_BY(mu_);          // the newest checkpoint this job saved
  absl::Time last_time_ ABSL_GUARDED_BY(mu_) = absl::Now();
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration last_pause_ ABSL_GUARDED_BY(mu_);
  int64_t last_snapshot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<nlohmann::json()> ledger_source_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

// InvalidArgument naming the first variable or table whose name, shape or dim differs between
// the checkpoint and the model (or that one of them lacks).
absl::Status CheckSignature(const LoadedCheckpoint& ckpt, const ModelSignature& model);

// Creates `vars` (their initial values replaced by the checkpoint's) through `placer` and the
// `tables` through `creator`, then imports every slot, version and table row into today's PS
// (dense shards by row range, table rows by PsOfKey). InvalidArgument if a variable's optimizer
// differs from the checkpoint's (its slots would not match). `*placement` receives the new
// placement.
absl::Status RestoreParameters(const LoadedCheckpoint& ckpt, const std::vector<NewVariable>& vars,
                               const std::vector<TableDef>& tables, VariablePlacer* placer,
                               TableCreator* creator, const std::vector<std::string>& ps_addresses,
                               absl::Duration rpc_timeout, std::vector<Placement>* placement);

// A client program's parameter, one at a time (docs/checkpoints.md): `var` created through
// `placer` (GetOrCreate with `partitioner`) with the values of the checkpoint's variable of its
// name, then its slots, version and watermarks imported; `def` created through `creator` and
// every saved row of its name imported. NotFound if the checkpoint holds no parameter of that
// name (the caller creates it afresh); InvalidArgument naming both if its shape, dim or
// optimizer differs. The caller makes sure no one uses the parameter before this returns.
absl::StatusOr<Placement> RestoreVariable(const LoadedCheckpoint& ckpt, const NewVariable& var,
                                          const std::string& partitioner, VariablePlacer* placer,
                                          const std::vector<std::string>& ps_addresses,
                                          absl::Duration rpc_timeout);
absl::Status RestoreTable(const LoadedCheckpoint& ckpt, const TableDef& def, TableCreator* creator,
                          const std::vector<std::string>& ps_addresses, absl::Duration rpc_timeout);

// The result of a job that finished, kept beside its checkpoints (<dir>/result.json) from
// before the chief tells the tasks to stop until the next chief that is not a restart starts
// on the directory: a chief restarted after the job ended reports it rather than waiting for
// tasks that have exited. Only the holder of the directory's lock calls these.
absl::Status SaveJobResult(const std::string& dir, const std::string& json);
// The saved result, or "" when there is none (a file that does not parse as a JSON object is
// named in a warning and counts as none).
std::string SavedJobResult(const std::string& dir);
void RemoveJobResult(const std::string& dir);

// The job's checkpoints: a manager when config.checkpoint_dir is set (failing as Create does),
// and the checkpoint to start from when config.restore_from is (failing as LoadCheckpoint does).
// A chief that is not config.restarted removes the directory's saved result; a restarted one
// that finds it gets it in `*finished` (and no checkpoint loaded): the job ended before it.
absl::Status OpenCheckpoints(const JobConfig& config, const std::vector<std::string>& ps_addresses,
                             std::unique_ptr<CheckpointManager>* manager,
                             std::unique_ptr<LoadedCheckpoint>* restore, std::string* finished);

}  // namespace pstrain
