#include "client/client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"

namespace pstrain {
namespace {

constexpr int kReportEvery = 20;  // pushes between progress reports to the chief
constexpr char kStartBarrier[] = "pstrain/start";

absl::Status CheckOptions(const ClientOptions& o) {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.chief.empty()) return bad("client options: no chief address");
  if (o.ps.empty()) return bad("client options: no ps addresses");
  for (size_t i = 0; i < o.ps.size(); ++i) {
    if (o.ps[i].empty()) return bad("client options: ps ", i, " has an empty address");
  }
  if (o.task < 0) return bad("client options: task ", o.task, " is negative");
  if (o.timeout <= absl::ZeroDuration()) return bad("client options: timeout must be positive");
  return absl::OkStatus();
}

}  // namespace

Client::Client(const ClientOptions& options, std::unique_ptr<MasterService::Stub> master)
    : options_(options), sender_(MakeSender("worker", options.task)), master_(std::move(master)) {
  RebuildPsClient();
}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  std::unique_ptr<Client> c(
      new Client(options, MasterService::NewStub(MakeChannel(options.chief))));
  const std::string chief = "chief " + options.chief;
  RegisterRequest req;
  *req.mutable_sender() = c->sender_;
  RegisterResponse resp;
  // The chief may answer only once the cluster is ready, so each attempt may take what is left.
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::Status s = RetryUntil(options.timeout, "the chief at " + options.chief, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Seconds(1))));
    return FromGrpcStatus(c->master_->Register(&ctx, req, &resp), "Register", chief);
  });
  if (!s.ok()) return s;
  c->mode_ = resp.mode();
  if (s = c->Barrier(kStartBarrier); !s.ok()) return s;
  return c;
}

void Client::RebuildPsClient() {
  ps_ = std::make_unique<PsClient>(options_.ps, variables_, sender_, options_.timeout);
  pulled_ = false;
}

absl::Status Client::CheckUsable() const {
  if (done_) return absl::FailedPreconditionError("the client is done: Done() was called");
  if (stopping_) return absl::CancelledError("the chief is ending the job");
  return absl::OkStatus();
}

absl::StatusOr<int> Client::CreateVariable(const VariableOptions& v) {
  if (done_) return absl::FailedPreconditionError("the client is done: Done() was called");
  if (v.name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  for (int64_t d : v.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("variable \"", v.name, "\" has shape ",
                                                     ShapeString(v.shape), ": dims must be >= 0"));
    }
  }
  CreateVariableRequest req;
  *req.mutable_sender() = sender_;
  VariableSpec* spec = req.mutable_spec();
  spec->set_name(v.name);
  spec->mutable_shape()->Assign(v.shape.begin(), v.shape.end());
  *spec->mutable_initializer() = v.initializer;
  *spec->mutable_optimizer() = v.optimizer;
  spec->set_partitioner(v.partitioner);
  CreateVariableResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  absl::Status s = FromGrpcStatus(master_->CreateVariable(&ctx, req, &resp),
                                  "CreateVariable \"" + v.name + "\"", "chief " + options_.chief);
  if (!s.ok()) return s;
  // A bad answer from the chief is an error here rather than a crash later.
  absl::StatusOr<VariableRef> ref =
      ToVariableRef(resp.placement(), v.name, v.shape, static_cast<int>(options_.ps.size()));
  if (!ref.ok()) return absl::InternalError(absl::StrCat("chief's ", ref.status().message()));
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (variables_[i].name == v.name) {
      if (variables_[i].shape != v.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable \"", v.name, "\" was created with shape ",
                         ShapeString(variables_[i].shape), ", asked for ", ShapeString(v.shape)));
      }
      return static_cast<int>(i);
    }
  }
  variables_.push_back(*std::move(ref));
  RebuildPsClient();
  return static_cast<int>(variables_.size() - 1);
}

absl::Status Client::Pull(std::vector<const float*>* values) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (variables_.empty()) {
    return absl::FailedPreconditionError("Pull before any CreateVariable: nothing to pull");
  }
  const bool sync = mode_ == "sync";
  absl::Status s =
      ps_->Pull(values, sync ? next_min_version_ : 0, mode_ == "ssp" ? pushes_ : 0, sync);
  if (!s.ok()) return s;
  pulled_ = true;
  global_step_ = static_cast<int64_t>(ps_->min_version_read());
  return absl::OkStatus();
}

absl::Status Client::Push(const std::vector<Tensor>& grads, int64_t examples,
                          std::optional<double> loss) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (!pulled_) {
    return absl::FailedPreconditionError(
        "Push without a Pull since the last CreateVariable: pull the variables first");
  }
  int stale = 0;
  if (absl::Status s = ps_->Push(grads, &stale); !s.ok()) return s;
  // Sync: the step this push contributed to is the one read; the next pull waits for the next.
  next_min_version_ = ps_->min_version_read() + 1;
  ++pushes_;
  examples_ += std::max<int64_t>(examples, 0);
  stale_dropped_ += stale;
  if (loss.has_value()) {
    loss_sum_ += *loss;
    ++loss_count_;
  }
  if (pushes_ % kReportEvery == 0) return Report(false, "");
  return absl::OkStatus();
}

absl::Status Client::Report(bool done, const std::string& error) {
  ProgressRequest req;
  *req.mutable_sender() = sender_;
  req.set_steps(pushes_);
  req.set_examples(examples_);
  if (loss_count_ > 0) last_loss_ = loss_sum_ / loss_count_;
  loss_sum_ = 0;
  loss_count_ = 0;
  req.set_loss(last_loss_);
  req.set_done(done);
  req.set_error(error);
  req.set_stale_dropped(stale_dropped_);
  ProgressResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  absl::Status s = FromGrpcStatus(master_->ReportProgress(&ctx, req, &resp), "ReportProgress",
                                  "chief " + options_.chief);
  // The push before this report was applied; the job ending shows at the next Pull or Push.
  if (s.ok() && resp.stop()) stopping_ = true;
  return s;
}

absl::Status Client::Barrier(const std::string& name) {
  if (done_) return absl::FailedPreconditionError("the client is done: Done() was called");
  BarrierRequest req;
  *req.mutable_sender() = sender_;
  req.set_name(name);
  BarrierResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  return FromGrpcStatus(master_->Barrier(&ctx, req, &resp), "Barrier \"" + name + "\"",
                        "chief " + options_.chief);
}

absl::Status Client::Done(const absl::Status& outcome) {
  if (done_) return absl::FailedPreconditionError("Done() was already called");
  done_ = true;
  // Leave first: once the last worker reports done the chief shuts the PS down. After the
  // chief said stop, the PS may already be gone, so a failed Leave is no error then.
  absl::Status left = ps_->Leave();
  if (stopping_) left = absl::OkStatus();
  absl::Status reported = Report(outcome.ok(), outcome.ok() ? "" : std::string(outcome.message()));
  return !left.ok() ? left : reported;
}

}  // namespace pstrain
