// CheckpointManager: the lock on the directory, the cut over every PS, the manifest and the
// removal of old checkpoints.
#include "master/checkpoints.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_manifest.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace fs = std::filesystem;
namespace {

// Sync mode: cuts tried until every shard and table is at one step.
constexpr int kSyncAttempts = 200;
// The longest a PS stays frozen if the chief never releases it.
constexpr double kFreezeTimeoutSecs = 30;
// The longest the chief waits for the PS to write their parts.
constexpr absl::Duration kWriteTimeout = absl::Minutes(30);

// Runs fn(t) for every PS task at once; the statuses by task.
std::vector<absl::Status> OnEveryPs(size_t n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> out(n);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] { out[t] = fn(static_cast<int>(t)); });
  }
  for (std::thread& th : threads) th.join();
  return out;
}

// Puts the whole checkpoint `next` in the place of `dir` in one step (renameat2's
// RENAME_EXCHANGE: `dir` is never missing), then removes what was `dir`. On a failure `dir` is
// as it was.
absl::Status SwapIn(const std::string& next, const std::string& dir) {
  if (::renameat2(AT_FDCWD, next.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    return absl::InternalError(
        absl::StrCat("replacing ", dir, " by ", next, ": ", std::strerror(errno)));
  }
  const std::string parent = fs::path(dir).parent_path().string();
  if (const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code ec;
  fs::remove_all(next, ec);  // the checkpoint replaced
  return absl::OkStatus();
}

absl::Status FirstError(const std::vector<absl::Status>& all) {
  for (const absl::Status& s : all) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

struct CheckpointManager::Cut {
  uint64_t seq = 0;
  int64_t step = 0;
  std::string dir;
  nlohmann::json ledger;  // the chief's ledger while every PS was frozen
  // The PS are in the last checkpoint's state (its step and its stamps): nothing was written.
  bool unchanged = false;
  // Per PS its state stamp and table rows (CheckpointResponse): equal to the last checkpoint's,
  // the state is that checkpoint's.
  std::vector<std::pair<uint64_t, int64_t>> stamps;
  // An earlier checkpoint of this step that this one replaces: `dir` is then <it>.next, swapped
  // with it once whole.
  std::string replaces;
  ModelSignature signature;  // what the frozen PS held: a parameter created later is not in it

  // Where the checkpoint is once written.
  const std::string& path() const { return replaces.empty() ? dir : replaces; }
};

absl::StatusOr<std::unique_ptr<CheckpointManager>> CheckpointManager::Create(
    const CheckpointOptions& options, const std::vector<std::string>& ps_addresses) {
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("--checkpoint_dir ", options.dir, ": ", ec.message()));
  }
  const std::string lock = options.dir + "/LOCK";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--checkpoint_dir: opening the lock file ", lock, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("--checkpoint_dir ", options.dir, " is in use by another chief (", lock,
                     " is locked", n > 0 ? absl::StrCat(" by pid ", holder) : std::string(), ")"));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    spdlog::warn("could not write this chief's pid into {}", lock);
  }
  RemoveUnfinishedRewrites(options.dir);
  return std::unique_ptr<CheckpointManager>(new CheckpointManager(options, ps_addresses, fd));
}

CheckpointManager::CheckpointManager(const CheckpointOptions& options,
                                     const std::vector<std::string>& ps_addresses, int lock_fd)
    : options_(options), lock_fd_(lock_fd) {
  for (const std::string& a : ps_addresses) {
    ps_.push_back(ParameterServerService::NewStub(MakeChannel(a)));
  }
  for (const auto& [step, dir] : ListCheckpoints(options_.dir)) {
    if (ReadManifest(dir).ok()) {
      absl::MutexLock lock(&mu_);
      last_path_ = dir;  // what a failed save leaves intact
      break;
    }
  }
}

CheckpointManager::~CheckpointManager() {
  JoinWriter();
  ::close(lock_fd_);  // releases the lock
}

void CheckpointManager::JoinWriter() {
  if (writer_.joinable()) writer_.join();
}

void CheckpointManager::SetModel(std::vector<Placement> placement, ModelSignature signature) {
  absl::MutexLock lock(&mu_);
  placement_ = std::move(placement);
  signature_ = std::move(signature);
}

void CheckpointManager::AddVariable(Placement placement, std::vector<int64_t> shape) {
  absl::MutexLock lock(&mu_);
  signature_.variables.push_back({placement.variable(), std::move(shape)});
  placement_.push_back(std::move(placement));
}

void CheckpointManager::AddTable(const std::string& name, int dim) {
  absl::MutexLock lock(&mu_);
  signature_.tables.push_back({name, dim});
}

void CheckpointManager::SetLedgerSource(std::function<nlohmann::json()> ledger_at_cut) {
  absl::MutexLock lock(&mu_);
  ledger_source_ = std::move(ledger_at_cut);
}

void CheckpointManager::SetRestoredStep(int64_t step) {
  // A write of the generation before must not set the stamps after this.
  absl::MutexLock save(&save_mu_);
  JoinWriter();
  absl::MutexLock lock(&mu_);
  last_step_ = step;
  last_trigger_step_ = step;
  last_stamps_.clear();  // unknown: the next cut at this step is written
}

absl::Duration CheckpointManager::last_pause() const {
  absl::MutexLock lock(&mu_);
  return last_pause_;
}

int64_t CheckpointManager::last_snapshot_bytes() const {
  absl::MutexLock lock(&mu_);
  return last_snapshot_bytes_;
}

void CheckpointManager::MaybeSave(int64_t global_step) {
  {
    absl::MutexLock lock(&mu_);
    if (writing_) return;
    const bool by_steps =
        options_.every_steps > 0 &&
        global_step - std::max<int64_t>(last_trigger_step_, 0) >= options_.every_steps;
    const bool by_time =
        options_.every_secs > 0 && absl::Now() - last_time_ >= absl::Seconds(options_.every_secs);
    if (!by_steps && !by_time) return;
    last_trigger_step_ = global_step;
  }
  Save(false).IgnoreError();  // logged
}

absl::StatusOr<std::string> CheckpointManager::SaveAndWait() { return Save(true); }

absl::StatusOr<std::string> CheckpointManager::Save(bool wait) {
  absl::MutexLock save(&save_mu_);
  JoinWriter();
  std::string previous;
  {
    absl::MutexLock lock(&mu_);
    previous = last_path_;
    last_time_ = absl::Now();
  }
  auto failed = [previous](const absl::Status& s) {  // may run on the writer thread
    const std::string intact =
        previous.empty() ? std::string("no earlier checkpoint exists")
                         : absl::StrCat("the previous checkpoint ", previous, " is intact");
    absl::Status out(s.code(), absl::StrCat("checkpoint not saved: ", s.message(), "; ", intact));
    spdlog::error("{}", std::string(out.message()));
    return out;
  };
  absl::StatusOr<Cut> cut = TakeCut();
  if (cut.ok() && cut->unchanged) {
    UpdateLedger(previous, *cut);
    return previous;
  }
  if (!cut.ok()) return failed(cut.status());
  {
    absl::MutexLock lock(&mu_);
    writing_ = true;
  }
  auto finish = [this, failed, c = *cut]() -> absl::StatusOr<std::string> {
    absl::Status s = Finish(c);
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!s.ok()) {
      std::error_code ec;
      fs::remove_all(c.dir, ec);
      return failed(s);
    }
    last_path_ = c.path();
    last_step_ = c.step;
    last_stamps_ = c.stamps;
    return c.path();
  };
  if (wait) return finish();
  writer_ = std::thread([finish] { finish().IgnoreError(); });
  return cut->path();
}

absl::StatusOr<CheckpointManager::Cut> CheckpointManager::TakeCut() {
  const int num_ps = static_cast<int>(ps_.size());
  std::vector<CheckpointRequest> freeze(num_ps);
  Cut cut;
  int64_t last_step;
  std::function<nlohmann::json()> ledger_source;
  std::vector<std::pair<uint64_t, int64_t>> last_stamps;
  {
    absl::MutexLock lock(&mu_);
    cut.seq = ++seq_;
    last_step = last_step_;
    last_stamps = last_stamps_;
    ledger_source = ledger_source_;
    for (CheckpointRequest& r : freeze) {
      *r.mutable_sender() = MakeSender("chief", 0);
      r.set_phase(CheckpointRequest::FREEZE);
      r.set_id(cut.seq);
      r.set_freeze_timeout_s(kFreezeTimeoutSecs);
      r.set_num_ps(num_ps);
    }
    cut.signature = signature_;
    const auto& vars = signature_.variables;
    for (size_t i = 0; i < placement_.size() && i < vars.size(); ++i) {
      for (const Shard& s : placement_[i].shards()) {
        CheckpointShard* c = freeze.at(s.ps_task()).add_shards();
        c->set_name(s.name());
        c->set_variable(placement_[i].variable());
        for (int64_t d : vars[i].second) c->add_shape(d);
        c->set_row_begin(s.row_begin());
        c->set_row_end(s.row_end());
      }
    }
  }
  auto call = [&](int t, const CheckpointRequest& req, CheckpointResponse* resp) {
    std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(options_.rpc_timeout);
    return FromGrpcStatus(ps_[t]->Checkpoint(ctx.get(), req, resp), "Checkpoint",
                          TaskName("ps", t));
  };
  auto phase_all = [&](CheckpointRequest::Phase phase, const std::string& dir) {
    return OnEveryPs(num_ps, [&](int t) {
      CheckpointRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      req.set_phase(phase);
      req.set_id(cut.seq);
      req.set_dir(dir);
      req.set_global_step(cut.step);
      CheckpointResponse resp;
      return call(t, req, &resp);
    });
  };
  for (int attempt = 0;; ++attempt) {
    const absl::Time start = absl::Now();
    std::vector<CheckpointResponse> resp(num_ps);
    absl::Status frozen =
        FirstError(OnEveryPs(num_ps, [&](int t) { return call(t, freeze[t], &resp[t]); }));
    if (!frozen.ok()) {
      phase_all(CheckpointRequest::ABORT, "");
      return frozen;
    }
    uint64_t lo = ~uint64_t{0}, hi = 0;
    int64_t bytes = 0;
    cut.stamps.clear();
    for (const CheckpointResponse& r : resp) {
      lo = std::min(lo, r.min_version());
      hi = std::max(hi, r.max_version());
      bytes += r.snapshot_bytes();
      cut.stamps.emplace_back(r.state_stamp(), r.table_rows());
    }
    if (options_.sync_mode && lo != hi && attempt + 1 < kSyncAttempts) {
      phase_all(CheckpointRequest::ABORT, "");  // a step is half applied: cut again
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    if (options_.sync_mode && lo != hi) {
      phase_all(CheckpointRequest::ABORT, "");
      return absl::UnavailableError(absl::StrCat("no cut between steps found in ", kSyncAttempts,
                                                 " attempts (versions ", lo, " to ", hi, ")"));
    }
    cut.step = static_cast<int64_t>(hi);
    if (ledger_source) cut.ledger = ledger_source();  // every PS is frozen at the cut
    // After a restore there are no stamps to compare: the state may have moved (a redone
    // batch applied on a part that lacked it) without its largest version.
    if (cut.step == last_step && !last_stamps.empty() && cut.stamps == last_stamps) {
      phase_all(CheckpointRequest::ABORT, "");
      cut.unchanged = true;
      return cut;
    }
    cut.dir = absl::StrCat(options_.dir, "/ckpt-", cut.step);
    std::error_code ec;
    if (fs::exists(absl::StrCat(cut.dir, "/", kManifestName), ec)) {
      // Async: a shard below the largest version moved since the checkpoint of this step. The
      // new one is written beside it and swapped in whole (Finish), so a checkpoint of this
      // step is always there to restore.
      cut.replaces = cut.dir;
      cut.dir += kRewriteSuffix;
    }
    fs::remove_all(cut.dir, ec);  // a failed earlier attempt at this step
    fs::create_directories(cut.dir, ec);
    if (ec) {
      phase_all(CheckpointRequest::ABORT, "");
      return absl::PermissionDeniedError(absl::StrCat("creating ", cut.dir, ": ", ec.message()));
    }
    absl::Status released = FirstError(phase_all(CheckpointRequest::RELEASE, cut.dir));
    const absl::Duration pause = absl::Now() - start;
    {
      absl::MutexLock lock(&mu_);
      last_pause_ = pause;
      last_snapshot_bytes_ = bytes;
    }
    if (!released.ok()) return released;
    spdlog::info("checkpoint at step {}: {} copied in memory, pushes paused {}", cut.step,
                 HumanBytes(bytes), absl::FormatDuration(pause));
    return cut;
  }
}

void CheckpointManager::UpdateLedger(const std::string& previous, const Cut& cut) {
  {
    absl::MutexLock lock(&mu_);
    if (previous != last_path_) return;
  }
  if (previous.empty() || cut.ledger.is_null()) return;
  absl::StatusOr<Manifest> m = ReadManifest(previous);
  if (!m.ok() || m->global_step != cut.step || m->ledger == cut.ledger) return;
  m->ledger = cut.ledger;
  if (absl::Status s = WriteManifest(previous, *m); !s.ok()) {
    spdlog::error("checkpoint {}: the ledger was not updated: {}", previous,
                  std::string(s.message()));
  }
}

absl::Status CheckpointManager::Finish(const Cut& cut) {
  const int num_ps = static_cast<int>(ps_.size());
  const absl::Time start = absl::Now();
  std::vector<WrittenFile> files(num_ps);
  absl::Status written = FirstError(OnEveryPs(num_ps, [&](int t) {
    while (absl::Now() - start < kWriteTimeout) {
      CheckpointRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      req.set_phase(CheckpointRequest::WAIT);
      req.set_id(cut.seq);
      CheckpointResponse resp;
      std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(options_.rpc_timeout);
      absl::Status s = FromGrpcStatus(ps_[t]->Checkpoint(ctx.get(), req, &resp), "Checkpoint",
                                      TaskName("ps", t));
      if (!s.ok()) return s;
      if (!resp.path().empty()) {
        files[t] = {resp.file_bytes(), resp.checksum()};
        return absl::OkStatus();
      }
    }
    return absl::DeadlineExceededError(absl::StrCat(
        TaskName("ps", t), " did not write its part within ", absl::FormatDuration(kWriteTimeout)));
  }));
  if (!written.ok()) return written;
  Manifest m;
  m.signature = cut.signature;
  m.global_step = cut.step;
  m.num_ps = num_ps;
  m.ledger = cut.ledger;
  int64_t total = 0;
  for (int t = 0; t < num_ps; ++t) {
    m.files.push_back({absl::StrCat("ps-", t, ".ckpt"), files[t]});
    total += files[t].bytes;
  }
  if (absl::Status s = WriteManifest(cut.dir, m); !s.ok()) return s;
  if (!cut.replaces.empty()) {
    if (absl::Status s = SwapIn(cut.dir, cut.replaces); !s.ok()) return s;
  }
  spdlog::info("checkpoint {} saved: {} in {}", cut.path(), HumanBytes(total),
               absl::FormatDuration(absl::Now() - start));
  RemoveOldCheckpoints(options_.dir, options_.keep);
  return absl::OkStatus();
}

ModelSignature SignatureOf(const Model& model) {
  ModelSignature sig;
  for (const ParamSpec& p : model.params()) sig.variables.push_back({p.name, p.shape});
  for (const TableSpec& t : model.tables()) sig.tables.push_back({t.name, t.dim});
  return sig;
}

absl::Status OpenCheckpoints(const JobConfig& config, const std::vector<std::string>& ps_addresses,
                             std::unique_ptr<CheckpointManager>* manager,
                             std::unique_ptr<LoadedCheckpoint>* restore, std::string* finished) {
  finished->clear();
  if (!config.checkpoint_dir.empty()) {
    CheckpointOptions o;
    o.dir = config.checkpoint_dir;
    o.every_steps = config.checkpoint_every_steps;
    o.every_secs = config.checkpoint_every_secs;
    o.keep = config.keep_checkpoints;
    o.sync_mode = config.mode == "sync";
    o.rpc_timeout = config.rpc_timeout;
    absl::StatusOr<std::unique_ptr<CheckpointManager>> m =
        CheckpointManager::Create(o, ps_addresses);
    if (!m.ok()) return m.status();
    *manager = *std::move(m);
    if (!config.restarted) {
      RemoveJobResult(config.checkpoint_dir);
    } else if (*finished = SavedJobResult(config.checkpoint_dir); !finished->empty()) {
      return absl::OkStatus();
    }
  }
  if (!config.restore_from.empty()) {
    absl::StatusOr<LoadedCheckpoint> ckpt = LoadCheckpoint(config.restore_from);
    if (absl::IsNotFound(ckpt.status()) && config.restore_if_any) {
      spdlog::info("{} holds no checkpoint yet: the job starts from scratch", config.restore_from);
    } else if (!ckpt.ok()) {
      return ckpt.status();
    } else {
      *restore = std::make_unique<LoadedCheckpoint>(*std::move(ckpt));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
