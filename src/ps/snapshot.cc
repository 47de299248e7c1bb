// The PS's part of checkpoints: the push gate, the checkpoint session (freeze, release, the
// background write) and ParameterServerImpl::Checkpoint and ::Import.
#include "ps/snapshot.h"

#include <sys/stat.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_codec.h"
#include "ps/parameter_server_impl.h"
#include "spdlog/spdlog.h"

namespace pstrain {

PushGate::~PushGate() {
  {
    absl::MutexLock lock(&mu_);
    OpenLocked();
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &running_));
  }
  if (watchdog_.joinable()) watchdog_.join();
}

void PushGate::Run(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      queued_.push_back(std::move(fn));
      return;
    }
    ++running_;
  }
  fn();
  End();
}

void PushGate::End() {
  absl::MutexLock lock(&mu_);
  --running_;
}

void PushGate::Close(absl::Time deadline) {
  if (watchdog_.joinable()) watchdog_.join();  // the last close's: its gate is open
  uint64_t close;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    close = ++closes_;
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &running_));
  }
  watchdog_ = std::thread([this, close, deadline] {
    absl::MutexLock lock(&mu_);
    auto opened = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !closed_ || closes_ != close; };
    mu_.AwaitWithDeadline(absl::Condition(&opened), deadline);
    if (!opened()) {
      spdlog::warn("a checkpoint froze this PS past its deadline: pushes go on without it");
      OpenLocked();
    }
  });
}

bool PushGate::Open() {
  absl::MutexLock lock(&mu_);
  const bool was_closed = closed_;
  OpenLocked();
  return was_closed;
}

void PushGate::OpenLocked() {
  closed_ = false;
  running_ += static_cast<int>(queued_.size());
  for (std::function<void()>& fn : queued_) {
    std::thread([this, fn = std::move(fn)] {
      fn();
      End();
    }).detach();
  }
  queued_.clear();
}

CheckpointSession::CheckpointSession(int task) : task_(task) {
  // A file size limit must fail a checkpoint's write, not kill the PS.
  std::signal(SIGXFSZ, SIG_IGN);
}

CheckpointSession::~CheckpointSession() { JoinWriter(); }

void CheckpointSession::JoinWriter() {
  if (writer_.joinable()) writer_.join();
}

std::unique_ptr<PartFile> CheckpointSession::TakeSpare() {
  absl::MutexLock lock(&mu_);
  return spare_ != nullptr ? std::move(spare_) : std::make_unique<PartFile>();
}

absl::Status CheckpointSession::BeginFreeze(const CheckpointRequest& req) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kFrozen || state_ == State::kWriting) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", req.id(), " on ps task ", task_, ": checkpoint ", id_,
                       state_ == State::kFrozen ? " is frozen" : " is being written"));
    }
    state_ = State::kFrozen;
    id_ = req.id();
    part_.reset();
  }
  JoinWriter();  // the last write ended (kDone): its thread only has to be joined
  const double timeout = req.freeze_timeout_s() > 0 ? req.freeze_timeout_s() : 30.0;
  gate_.Close(absl::Now() + absl::Seconds(timeout));
  return absl::OkStatus();
}

void CheckpointSession::EndFreeze(const CheckpointRequest& req, const absl::Status& copied,
                                  std::unique_ptr<PartFile> part, CheckpointResponse* resp) {
  absl::MutexLock lock(&mu_);
  if (!copied.ok()) {
    gate_.Open();
    state_ = State::kIdle;
    return;
  }
  part->ps_task = static_cast<uint32_t>(task_);
  part->num_ps = static_cast<uint32_t>(req.num_ps());
  resp->set_snapshot_bytes(part->PayloadBytes());
  part_ = std::move(part);
}

absl::Status CheckpointSession::Release(const CheckpointRequest& req) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kFrozen || id_ != req.id() || part_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("release of checkpoint ", req.id(),
                                                      " on ps task ", task_, ": it is not frozen"));
  }
  if (!gate_.Open()) {
    state_ = State::kIdle;
    part_.reset();
    return absl::FailedPreconditionError(
        absl::StrCat("release of checkpoint ", req.id(), " on ps task ", task_,
                     ": its freeze expired and pushes went on, so its copy was dropped"));
  }
  if (::mkdir(req.dir().c_str(), 0755) != 0 && errno != EEXIST) {
    state_ = State::kIdle;
    part_.reset();
    return absl::PermissionDeniedError(
        absl::StrCat("ps task ", task_, ": creating ", req.dir(), ": ", std::strerror(errno)));
  }
  state_ = State::kWriting;
  part_->checkpoint_id = req.global_step();
  path_ = absl::StrCat(req.dir(), "/ps-", task_, ".ckpt");
  writer_ = std::thread([this] {
    mu_.Lock();
    const PartFile* part = part_.get();
    const std::string path = path_;
    mu_.Unlock();
    absl::StatusOr<WrittenFile> w = WritePartFile(*part, path);  // part_ stays while kWriting
    absl::MutexLock lock(&mu_);
    if (w.ok()) {
      written_ = *w;
      result_ = absl::OkStatus();
    } else {
      spdlog::error("checkpoint {} not written: {}", id_, std::string(w.status().message()));
      result_ = absl::Status(w.status().code(),
                             absl::StrCat("ps task ", task_, ": ", w.status().message()));
    }
    spare_ = std::move(part_);
    state_ = State::kDone;
  });
  return absl::OkStatus();
}

absl::Status CheckpointSession::Abort(const CheckpointRequest& req) {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kFrozen && id_ == req.id()) {
    gate_.Open();
    spare_ = std::move(part_);
    state_ = State::kIdle;
  }
  return absl::OkStatus();
}

absl::Status CheckpointSession::Wait(const CheckpointRequest& req, CheckpointResponse* resp) {
  absl::MutexLock lock(&mu_);
  if (id_ != req.id() || state_ == State::kIdle || state_ == State::kFrozen) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", req.id(), " on ps task ", task_, " is not being written"));
  }
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](State* s) { return *s == State::kDone; }, &state_),
                       absl::Seconds(1));
  if (state_ != State::kDone) return absl::OkStatus();  // still writing: path stays empty
  if (!result_.ok()) return result_;
  resp->set_path(path_);
  resp->set_file_bytes(written_.bytes);
  resp->set_checksum(written_.checksum);
  return absl::OkStatus();
}

}  // namespace pstrain
