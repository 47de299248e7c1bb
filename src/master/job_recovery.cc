// The job loop's generations (docs/recovery.md): the task queue and recovery turned on, every
// PS Reset and Configured for a generation, the parameters created or restored, a rollback to
// the latest checkpoint, and the final check of every shard's and table's task watermarks.
#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "master/job.h"
#include "spdlog/spdlog.h"

namespace pstrain {

void DropWatermarks(LoadedCheckpoint* ckpt) {
  for (LoadedCheckpoint::Variable& v : ckpt->variables) {
    for (LoadedCheckpoint::Variable::Piece& p : v.pieces) p.applied.clear();
  }
  for (TableRecord& t : ckpt->tables) t.applied.clear();
  ckpt->table_part_applied.clear();
}

std::string CheckWatermarks(const std::vector<AppliedTasksResponse>& applied,
                            const LedgerShape& shape, int batch, int64_t shards, int64_t tables,
                            const std::function<int64_t(int epoch, int64_t task)>& batches_of) {
  const int64_t tasks_per_epoch = CeilDiv(shape.rows, shape.task_rows);
  int64_t shards_seen = 0, tables_seen = 0;
  for (size_t p = 0; p < applied.size(); ++p) {
    const std::pair<const char*, const google::protobuf::RepeatedPtrField<AppliedTasks>*> kinds[] =
        {{"shard", &applied[p].shards()}, {"table", &applied[p].tables()}};
    for (const auto& [kind, list] : kinds) {
      for (const AppliedTasks& a : *list) {
        ++(kind[0] == 's' ? shards_seen : tables_seen);
        std::map<std::pair<int, int64_t>, int64_t> marks;
        for (const TaskWatermark& w : a.tasks()) marks[{w.epoch(), w.task()}] = w.next_batch();
        const std::string where = absl::StrCat(TaskName("ps", p), " ", kind, " ", a.name());
        for (const auto& [key, next] : marks) {
          if (key.first < 0 || key.first >= shape.epochs || key.second < 0 ||
              key.second >= tasks_per_epoch) {
            return absl::StrCat(where, " holds batches of task ", key.second, " of epoch ",
                                key.first, ", which the job does not have");
          }
        }
        for (int e = 0; e < shape.epochs; ++e) {
          for (int64_t t = 0; t < tasks_per_epoch; ++t) {
            const int64_t rows = std::min(shape.task_rows, shape.rows - t * shape.task_rows);
            const int64_t want = batches_of ? batches_of(e, t) : CeilDiv(rows, batch);
            const auto it = marks.find({e, t});
            const int64_t got = it == marks.end() ? 0 : it->second;
            if (got != want) {
              return absl::StrCat(where, ": task ", t, " of epoch ", e, " has ", got, " of its ",
                                  want, " batches applied");
            }
          }
        }
      }
    }
  }
  if (shards_seen != shards) {
    return absl::StrCat("the PS hold ", shards_seen, " shards; the job created ", shards);
  }
  if (tables_seen != tables * static_cast<int64_t>(applied.size())) {
    return absl::StrCat("the PS hold ", tables_seen, " table parts; the job created ",
                        tables * static_cast<int64_t>(applied.size()));
  }
  return "";
}

LedgerShape Job::Shape() const {
  return {model_job_ != nullptr ? model_job_->train_records() : config_.rows, task_rows_,
          config_.epochs, static_cast<int>(workers_.size())};
}

absl::Status Job::EnableTasks() {
  if (task_rows_ <= 0) return absl::OkStatus();
  if (absl::Status s = coordinator_->EnableTasks(Shape(), absl::Seconds(config_.heartbeat_secs),
                                                 absl::Seconds(config_.heartbeat_timeout_secs));
      !s.ok()) {
    return s;
  }
  coordinator_->EnableRecovery();
  coordinator_->SetTaskSeed(config_.seed);
  const LedgerShape shape = Shape();
  spdlog::info("task queue on ({} tasks of {} rows per epoch): recovery on",
               CeilDiv(shape.rows, task_rows_), task_rows_);
  return absl::OkStatus();
}

absl::Status Job::BeginGeneration(LoadedCheckpoint* ckpt) {
  const nlohmann::json ledger = ckpt != nullptr ? ckpt->ledger : nlohmann::json();
  // Watermarks without their ledger would drop the pushes of the fresh ledger's tasks.
  if (ckpt != nullptr && ledger.is_null()) DropWatermarks(ckpt);
  absl::StatusOr<uint64_t> g = coordinator_->BeginGeneration(ledger, ps_generation_);
  if (!g.ok() && absl::IsInvalidArgument(g.status()) && !ledger.is_null()) {
    spdlog::warn("the ledger of {} does not fit this job ({}): every task starts afresh",
                 ckpt->path, std::string(g.status().message()));
    DropWatermarks(ckpt);
    g = coordinator_->BeginGeneration(nlohmann::json(), ps_generation_);
  }
  if (!g.ok()) return g.status();
  generation_ = *g;
  return absl::OkStatus();
}

absl::Status Job::ResetPs(absl::Duration timeout) {
  if (!Recovery()) return absl::OkStatus();
  ResetRequest req;
  *req.mutable_sender() = Chief();
  for (size_t t = 0; t < ps_.size(); ++t) {
    ResetResponse resp;
    absl::Status s =
        CallAsNewChief(timeout, "Reset", TaskName("ps", t),
                       [&](grpc::ClientContext* ctx) { return ps_[t]->Reset(ctx, req, &resp); });
    if (!s.ok()) return s;
    ps_generation_ = std::max(ps_generation_, resp.generation());
  }
  return absl::OkStatus();
}

absl::Status Job::ConfigurePs() {
  ConfigureRequest req;
  *req.mutable_sender() = Chief();
  ConsistencyConfig* c = req.mutable_consistency();
  c->set_mode(config_.mode);
  c->set_num_workers(static_cast<int>(workers_.size()));
  const int replicas = config_.replicas_to_aggregate > 0 ? config_.replicas_to_aggregate
                                                         : static_cast<int>(workers_.size());
  c->set_replicas_to_aggregate(replicas);
  c->set_staleness(config_.staleness);
  const std::vector<Sender> workers = coordinator_->Workers();
  for (const Sender& w : workers) *req.add_workers() = w;
  req.set_wait_timeout_s(absl::ToDoubleSeconds(config_.task_timeout));
  req.set_generation(generation_);
  for (size_t t = 0; t < ps_.size(); ++t) {
    ConfigureResponse resp;
    absl::Status s =
        CallWithRetry(config_.rpc_timeout, "Configure", TaskName("ps", t),
                      [&](grpc::ClientContext* ctx) { return ps_[t]->Configure(ctx, req, &resp); });
    if (!s.ok()) return s;
  }
  configured_workers_ = workers;
  // Client programs take tasks once their parameters are in place (Run, Rollback).
  if (model_job_ != nullptr) coordinator_->AnnounceWorkers(workers);
  spdlog::info("mode {}{}{}", config_.mode,
               config_.mode == "sync"
                   ? absl::StrCat(": ", replicas, " of ", workers_.size(), " gradients per step")
               : config_.mode == "ssp" ? absl::StrCat(": staleness ", config_.staleness)
                                       : std::string(),
               generation_ > 0 ? absl::StrCat(", generation ", generation_) : std::string());
  return absl::OkStatus();
}

absl::Status Job::CreateModel(const LoadedCheckpoint* ckpt) {
  // The PS were Reset (or are new): nothing created before is there.
  placer_->Forget();
  tables_->Forget();
  ModelJob::RestoreFn restore;
  if (ckpt != nullptr) {
    restore = [this, ckpt](const auto& vars, const auto& defs, std::vector<Placement>* placement) {
      if (absl::Status s = CheckSignature(*ckpt, model_job_->Signature()); !s.ok()) {
        return s;
      }
      return RestoreParameters(*ckpt, vars, defs, placer_, tables_, ps_addresses_,
                               config_.rpc_timeout, placement);
    };
  }
  if (absl::Status s = model_job_->CreateParameters(config_.optimizer, placer_, tables_, restore);
      !s.ok()) {
    return s;
  }
  if (checkpoints_ != nullptr) {
    TrainingSpec spec;
    model_job_->FillSpec(&spec);
    checkpoints_->SetModel({spec.placement().begin(), spec.placement().end()},
                           model_job_->Signature());
  }
  WarnIfUnbalanced();
  return absl::OkStatus();
}

absl::Status Job::WaitForPs(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::vector<std::string> missing;
    const std::vector<Sender> ps = coordinator_->PsTasks();
    for (size_t t = 0; t < ps.size(); ++t) {
      if (ps[t].incarnation() == 0) missing.push_back(TaskName("ps", t));
    }
    if (missing.empty()) return absl::OkStatus();
    if (std::optional<std::string> r = coordinator_->AbortReason()) return Stopped(*r);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rollback: ", absl::StrJoin(missing, ", "), " did not register within ",
                       absl::FormatDuration(timeout), " (--task_timeout)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::StatusOr<LoadedCheckpoint*> Job::LatestCheckpoint() {
  if (!config_.checkpoint_dir.empty()) {
    absl::StatusOr<LoadedCheckpoint> ckpt = LoadCheckpoint(config_.checkpoint_dir);
    if (ckpt.ok()) {
      latest_ = std::make_unique<LoadedCheckpoint>(*std::move(ckpt));
      return latest_.get();
    }
    if (!absl::IsNotFound(ckpt.status())) return ckpt.status();
  }
  return restore_;  // where the job started: a checkpoint, or null for the initial values
}

absl::Status Job::Rollback(const std::string& reason, std::vector<absl::Time>* alive) {
  spdlog::warn("rollback: {}; the job goes on from its latest checkpoint", reason);
  if (absl::Status s = WaitForPs(config_.task_timeout); !s.ok()) return s;
  absl::StatusOr<LoadedCheckpoint*> ckpt = LatestCheckpoint();
  if (!ckpt.ok()) return ckpt.status();
  if (absl::Status s = BeginGeneration(*ckpt); !s.ok()) return s;
  // A PS that died and is not back yet is waited for as long as a silent task.
  if (absl::Status s = ResetPs(config_.task_timeout); !s.ok()) return s;
  if (absl::Status s = ConfigurePs(); !s.ok()) return s;
  if (model_job_ != nullptr) {
    if (absl::Status s = CreateModel(*ckpt); !s.ok()) return s;
  } else if (absl::Status s = RecreateProgramParameters(*ckpt); !s.ok()) {
    return s;
  }
  if (checkpoints_ != nullptr && *ckpt != nullptr) {
    checkpoints_->SetRestoredStep((*ckpt)->global_step);
  }
  if (model_job_ != nullptr) {
    int64_t bad_lines = 0;  // counted at the first start already
    if (absl::Status s = StartWorkers(&bad_lines); !s.ok()) return s;
  } else {
    // The programs learn of the new generation at their next call to a PS or the chief, and
    // take tasks again now (docs/recovery.md, "Client programs").
    for (size_t t = 0; t < configured_workers_.size() && t < started_.size(); ++t) {
      started_[t] = configured_workers_[t].incarnation();
    }
    coordinator_->AnnounceWorkers(configured_workers_);
  }
  std::fill(alive->begin(), alive->end(), absl::Now());
  spdlog::info("generation {} started from {}", generation_,
               *ckpt != nullptr ? (*ckpt)->path : std::string("the initial values"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Job::CheckApplied() {
  std::vector<AppliedTasksResponse> applied(ps_.size());
  AppliedTasksRequest req;
  *req.mutable_sender() = Chief();
  for (size_t t = 0; t < ps_.size(); ++t) {
    absl::Status s = CallWithRetry(
        config_.rpc_timeout, "AppliedTasks", TaskName("ps", t),
        [&](grpc::ClientContext* ctx) { return ps_[t]->AppliedTasks(ctx, req, &applied[t]); });
    if (!s.ok()) return s;
  }
  // Every task is applied by now (the ledger's check ran first): its steps are its batches.
  const nlohmann::json ledger = coordinator_->LedgerJson();
  auto batches_of = [&ledger](int e, int64_t t) -> int64_t {
    return ledger.at("ledger").at(e).at(t).at("steps").get<int64_t>();
  };
  return CheckWatermarks(
      applied, Shape(), config_.batch_size, placer_->NumShards(),
      static_cast<int64_t>(model_job_ != nullptr ? model_job_->model().tables().size()
                                                 : tables_->tables().size()),
      batches_of);
}

void Job::LedgerTotals(JobResult* result) {
  const nlohmann::json l = coordinator_->LedgerJson();
  result->task_queue = true;
  result->tasks = l["tasks"].get<int64_t>();
  result->tasks_applied = l["applied"].get<int64_t>();
  result->tasks_redone = l["redone"].get<int64_t>();
  result->workers_declared_dead = l["workers_declared_dead"].get<int64_t>();
  const Coordinator::Failures f = coordinator_->failures();
  result->workers_replaced = f.workers_replaced;
  result->rollbacks = f.rollbacks;
  result->chief_restarts = f.chief_restarts;
  result->ledger_check = coordinator_->LedgerCheck();
  if (!result->ledger_check.empty()) return;
  absl::StatusOr<std::string> applied = CheckApplied();
  result->ledger_check = applied.ok() ? *applied
                                      : absl::StrCat("the task watermarks could not be read: ",
                                                     applied.status().message());
}

}  // namespace pstrain
