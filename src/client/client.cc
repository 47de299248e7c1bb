#include "client/client.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/options_proto.h"
#include "client/ps_client.h"
#include "common/half.h"
#include "common/initializer_def.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "master.grpc.pb.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

constexpr int kReportEvery = 20;  // pushes between progress reports to the chief
constexpr char kStartBarrier[] = "pstrain/start";

absl::Status CheckOptions(const ClientOptions& o) {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.chief.empty()) return bad("client options: no chief address");
  if (o.task < 0 || o.task >= kMaxTasks) {
    return bad("client options: task ", o.task, " is not in [0, ", kMaxTasks, ")");
  }
  if (o.timeout <= absl::ZeroDuration()) return bad("client options: timeout must be positive");
  if (absl::StatusOr<DataType> d = DtypeFromName(o.push_dtype); !d.ok()) {
    return bad("client options: push_dtype: ", d.status().message());
  }
  return absl::OkStatus();
}

// The data plane of `o.transport`, else of PSTRAIN_TRANSPORT, else the process's (gRPC unless
// SetTransportOptions chose another), under this process's security.
absl::StatusOr<std::string> ClientTransport(const ClientOptions& o) {
  if (!o.transport.empty()) return TransportUnderSecurity(o.transport, "client options: transport");
  const char* env = std::getenv("PSTRAIN_TRANSPORT");
  if (env != nullptr && *env != '\0') return TransportUnderSecurity(env, "PSTRAIN_TRANSPORT");
  return TransportUnderSecurity(GetTransportOptions().transport, "the process's transport");
}

absl::Status CheckVariable(const VariableOptions& v) {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("variable \"", v.name, "\": ", parts...));
  };
  if (v.name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  if (v.name.size() > static_cast<size_t>(kMaxNameBytes)) {
    return bad("the name has ", v.name.size(), " bytes, more than ", kMaxNameBytes);
  }
  for (int64_t d : v.shape) {
    if (d < 0) return bad("shape ", ShapeString(v.shape), " has a negative dimension");
  }
  if (v.shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return bad("shape has rank ", v.shape.size(), ", more than ", kMaxTensorRank);
  }
  const std::optional<int64_t> n = CheckedNumElements(v.shape);
  if (!n || !CheckedMul(*n, sizeof(float))) {
    return bad("shape ", ShapeString(v.shape), " has more elements than int64 can count");
  }
  return absl::OkStatus();
}

absl::Status CheckTable(const TableOptions& t) {
  if (t.name.empty()) return absl::InvalidArgumentError("a table needs a name");
  if (t.name.size() > static_cast<size_t>(kMaxNameBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("table \"", t.name.substr(0, 64),
                                                   "...\": the name has ", t.name.size(),
                                                   " bytes, more than ", kMaxNameBytes));
  }
  if (t.dim < 1 || t.dim > kMaxTableDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("table \"", t.name, "\": dim ", t.dim, " is not in [1, ", kMaxTableDim, "]"));
  }
  return absl::OkStatus();
}

// The wire form of `t`; an unset optimizer is adagrad with learning rate 0.05.
TableDef ToTableDef(const TableOptions& t) {
  TableDef def;
  def.set_name(t.name);
  def.set_dim(t.dim);
  *def.mutable_initializer() = InitializerDefOf(t.initializer);
  *def.mutable_optimizer() =
      ToProto(t.optimizer.value_or(OptimizerOptions{.name = "adagrad", .learning_rate = 0.05}));
  def.set_admit_after(t.admit_after);
  def.set_unadmitted_zeros(t.unadmitted_zeros);
  def.set_evict_after_steps(t.evict_after_steps);
  def.set_max_rows(t.max_rows_per_ps);
  def.set_max_bytes(t.max_bytes_per_ps);
  return def;
}

// Addresses of the PS from the chief's answer to Register.
absl::StatusOr<std::vector<std::string>> PsAddresses(const RegisterResponse& resp,
                                                     const std::string& chief) {
  auto bad = [&](auto... parts) {
    return absl::InternalError(absl::StrCat("the chief at ", chief, " ", parts...));
  };
  if (resp.ps_addresses().empty()) return bad("sent no ps addresses");
  if (resp.ps_addresses_size() > kMaxTasks) {
    return bad("sent ", resp.ps_addresses_size(), " ps addresses, more than ", kMaxTasks);
  }
  for (int i = 0; i < resp.ps_addresses_size(); ++i) {
    if (resp.ps_addresses(i).empty()) return bad("sent an empty address for ps:", i);
  }
  return std::vector<std::string>(resp.ps_addresses().begin(), resp.ps_addresses().end());
}

}  // namespace

absl::Status Client::Impl::Connect() {
  RegisterRequest req;
  *req.mutable_sender() = sender_;
  RegisterResponse resp;
  // The chief may answer only once the cluster is ready, so each attempt may take what is left.
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Status s = RetryUntil(options_.timeout, "the chief at " + options_.chief, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Seconds(1))));
    return FromGrpcStatus(master_->Register(&ctx, req, &resp), "Register", chief_);
  });
  if (!s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> ps = PsAddresses(resp, options_.chief);
  if (!ps.ok()) return ps.status();
  ps_addresses_ = *std::move(ps);
  {
    absl::MutexLock lock(&chief_mu_);
    chief_incarnation_ = resp.chief_incarnation();
  }
  mode_ = resp.mode();
  num_workers_ = resp.num_workers();
  push_dtype_ = *DtypeFromName(options_.push_dtype);  // CheckOptions accepted it
  RebuildPsClient();
  if (absl::Status s = WaitAtBarrier(kStartBarrier); !s.ok()) return s;
  return JoinTasks();
}

absl::Status Client::Impl::CheckUsable() const {
  if (done_) return absl::FailedPreconditionError("the client is done: Done() was called");
  if (stopping_) return absl::CancelledError("the chief is ending the job");
  return absl::OkStatus();
}

absl::StatusOr<int> Client::Impl::CreateVariable(const VariableOptions& v) {
  if (done_) return absl::FailedPreconditionError("the client is done: Done() was called");
  if (absl::Status s = CheckIdle("CreateVariable"); !s.ok()) return s;
  if (absl::Status s = CheckVariable(v); !s.ok()) return s;
  VariableSpec spec;
  spec.set_name(v.name);
  spec.mutable_shape()->Assign(v.shape.begin(), v.shape.end());
  *spec.mutable_initializer() = InitializerDefOf(v.initializer);
  if (v.optimizer) *spec.mutable_optimizer() = ToProto(*v.optimizer);
  spec.set_partitioner(v.partitioner);
  absl::StatusOr<VariableRef> ref = SendCreateVariable(spec, v.shape);
  if (!ref.ok()) return ref.status();
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
  var_specs_.push_back(std::move(spec));
  RebuildPsClient();
  return static_cast<int>(variables_.size() - 1);
}

absl::StatusOr<VariableRef> Client::Impl::SendCreateVariable(const VariableSpec& spec,
                                                             const std::vector<int64_t>& shape) {
  CreateVariableRequest req;
  *req.mutable_sender() = sender_;
  *req.mutable_spec() = spec;
  CreateVariableResponse resp;
  const std::string what = "CreateVariable \"" + spec.name() + "\"";
  // A restarted chief answers UNAVAILABLE until it is ready.
  absl::Status s = RetryUntil(options_.timeout, what + " at " + chief_, [&] {
    return FromGrpcStatus(master_->CreateVariable(Context().get(), req, &resp), what, chief_);
  });
  if (!s.ok()) return s;
  // A bad answer from the chief is an error here rather than a crash later.
  absl::StatusOr<VariableRef> ref = ToVariableRef(resp.placement(), spec.name(), shape, num_ps());
  if (!ref.ok()) return absl::InternalError(absl::StrCat("chief's ", ref.status().message()));
  return ref;
}

absl::Status Client::Impl::SendCreateTable(const TableDef& def) {
  CreateTableRequest req;
  *req.mutable_sender() = sender_;
  *req.mutable_table() = def;
  CreateTableResponse resp;
  const std::string what = "CreateTable \"" + def.name() + "\"";
  return RetryUntil(options_.timeout, what + " at " + chief_, [&] {
    return FromGrpcStatus(master_->CreateTable(Context().get(), req, &resp), what, chief_);
  });
}

absl::Status Client::Impl::AfterPush(Pushed kind, int64_t examples, std::optional<double> loss) {
  const Pushed other = kind == Pushed::kDense ? Pushed::kSparse : Pushed::kDense;
  examples_ += std::max<int64_t>(examples, 0);
  if (loss.has_value()) {
    loss_sum_ += *loss;
    ++loss_count_;
  }
  if (pushed_ == other) {  // the second half of a step already counted
    pushed_ = Pushed::kPaired;
    return absl::OkStatus();
  }
  pushed_ = kind;
  ++pushes_;
  if (task_) ++task_steps_;
  // With tasks a chief that is gone is waited for (a restarted chief takes over).
  if (pushes_ % kReportEvery == 0) return AbandonIfRolledBack(Report(false, ""));
  return absl::OkStatus();
}

void Client::Impl::RebuildTableClient() {
  session_->set_sender(sender_);
  session_->SetTables(tables_);
  looked_up_ = false;
}

absl::StatusOr<int> Client::Impl::CreateTable(const TableOptions& t) {
  if (done_) return absl::FailedPreconditionError("the client is done: Done() was called");
  if (absl::Status s = CheckTable(t); !s.ok()) return s;
  TableDef def = ToTableDef(t);
  if (absl::Status s = SendCreateTable(def); !s.ok()) return s;
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i].name == t.name) return static_cast<int>(i);  // the chief checked the rest
  }
  tables_.push_back({t.name, t.dim});
  table_defs_.push_back(std::move(def));
  RebuildTableClient();
  return static_cast<int>(tables_.size() - 1);
}

absl::Status Client::Impl::Lookup(const std::vector<std::vector<uint64_t>>& keys,
                                  std::vector<const float*>* rows) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (tables_.empty()) {
    return absl::FailedPreconditionError("Lookup before any CreateTable: no table to look up");
  }
  // As Pull: a sync lookup reads the step after this worker's last sparse push, except after a
  // barrier, when it reads the step that is there.
  if (absl::Status s = AdoptOutsideTask(); !s.ok()) return s;
  const bool sync = mode_ == "sync";
  const uint64_t min_version = sync && !tables_after_barrier_ ? next_table_version_ : 0;
  const int64_t clock = mode_ == "ssp" ? pushes_ : 0;
  absl::Status s =
      abandoned_ ? absl::OkStatus() : session_->Lookup(keys, {min_version, clock}, rows);
  if (!s.ok()) s = AbandonIfRolledBack(std::move(s));
  if (!s.ok()) return s;
  if (abandoned_ && !abandoned_in_task_) {
    // Outside a task the new generation's rows are read at once (the first read of a
    // generation does not wait for a step).
    if (absl::Status a = AdoptGeneration(); !a.ok()) return a;
    if (absl::Status a = session_->Lookup(keys, {0, clock}, rows); !a.ok()) return a;
  }
  if (abandoned_) {
    // The job rolled back: the task is abandoned and its pushes dropped, so any rows of the
    // right size do (zeros).
    if (keys.size() != tables_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Lookup: keys of ", keys.size(),
                                                     " tables, the client has ", tables_.size()));
    }
    zero_rows_.resize(tables_.size());
    rows->resize(tables_.size());
    for (size_t t = 0; t < tables_.size(); ++t) {
      zero_rows_[t].assign(keys[t].size() * static_cast<size_t>(tables_[t].dim), 0.0f);
      (*rows)[t] = zero_rows_[t].data();
    }
  }
  looked_up_ = true;
  tables_after_barrier_ = false;
  pushed_ = Pushed::kNone;
  return absl::OkStatus();
}

absl::Status Client::Impl::PushSparse(const std::vector<std::vector<uint64_t>>& keys,
                                      const std::vector<std::vector<float>>& grads,
                                      int64_t examples, std::optional<double> loss) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (!looked_up_) {
    return absl::FailedPreconditionError(
        "PushSparse without a Lookup since the last CreateTable: look the keys up first");
  }
  if (abandoned_) return absl::OkStatus();  // dropped: the job rolled back
  absl::StatusOr<std::optional<PushTag>> tag = TagFor(Pushed::kSparse);
  if (!tag.ok()) return tag.status();
  int stale = 0;
  // Sync: every PS takes part in every table's step, so each gets this worker's gradient (a
  // tagged push reaches every table part whatever the mode).
  if (absl::Status s =
          session_->PushSparse(keys, grads, mode_ == "sync", &stale, *tag ? &**tag : nullptr);
      !s.ok()) {
    return AbandonIfRolledBack(std::move(s));
  }
  next_table_version_ = session_->table_step() + 1;
  stale_dropped_ += stale;
  return AfterPush(Pushed::kSparse, examples, loss);
}

absl::Status Client::Impl::Report(bool done, const std::string& error) {
  ProgressRequest req;
  *req.mutable_sender() = sender_;
  req.set_steps(pushes_);
  req.set_examples(examples_);
  if (loss_count_ > 0) last_loss_ = loss_sum_ / loss_count_;
  loss_sum_ = 0;
  loss_count_ = 0;
  if (last_loss_.has_value()) req.set_loss(*last_loss_);
  req.set_done(done);
  req.set_error(error.substr(0, kMaxTextBytes));
  req.set_stale_dropped(stale_dropped_);
  ProgressResponse resp;
  absl::Status s = FromGrpcStatus(master_->ReportProgress(Context().get(), req, &resp),
                                  "ReportProgress", chief_);
  // The push before this report was applied; the job ending shows at the next Pull or Push.
  if (s.ok() && resp.stop()) stopping_ = true;
  return s;
}

absl::Status Client::Impl::Barrier(const std::string& name) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (name.empty() || name.size() > static_cast<size_t>(kMaxNameBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a barrier name has 1 to ", kMaxNameBytes, " bytes, got ", name.size()));
  }
  // Pause first: a worker waiting here must not hold back the steps of those still training,
  // or they would wait in a pull for this worker while it waits for them.
  if (absl::Status s = CheckIdle("Barrier"); !s.ok()) return s;
  while (true) {
    absl::Status s = session_->Leave(/*pause=*/true);
    if (s.ok()) {
      after_barrier_ = true;
      tables_after_barrier_ = true;
      s = WaitAtBarrier(name);
    }
    // With tasks: a chief that restarted (or a job that rolled back, which a PS answers the
    // pause with) meanwhile is waited for, and its barrier joined on the new generation
    // (paused there again).
    if (s.ok() || !has_tasks()) return s;
    if (absl::Status a = AbandonIfRolledBack(s); !a.ok() || !abandoned_) return s;
    if (absl::Status a = AdoptOutsideTask(); !a.ok()) return a;
    // A task was in hand (a barrier inside the task loop): the error stands, and the task
    // loop takes the new generation at its next NextTask.
    if (abandoned_) return s;
  }
}

absl::Status Client::Impl::WaitAtBarrier(const std::string& name) {
  BarrierRequest req;
  *req.mutable_sender() = sender_;
  req.set_name(name);
  BarrierResponse resp;
  // The chief answers a barrier that is still missing workers when this deadline comes, naming
  // them, so its message is the error.
  return FromGrpcStatus(master_->Barrier(Context().get(), req, &resp), "Barrier \"" + name + "\"",
                        chief_);
}

absl::Status Client::Impl::Done(const absl::Status& outcome) {
  if (done_) return absl::FailedPreconditionError("Done() was already called");
  if (absl::Status s = CheckIdle("Done"); !s.ok()) return s;
  done_ = true;
  if (has_tasks()) return DoneWithTasks(outcome);
  StopHeartbeats();
  // Leave first: once the last worker reports done the chief shuts the PS down. After the
  // chief said stop, the PS may already be gone and no step waits for this worker any more.
  absl::Status left = stopping_ ? absl::OkStatus() : session_->Leave();
  absl::Status reported = Report(outcome.ok(), outcome.ok() ? "" : std::string(outcome.message()));
  return !left.ok() ? left : reported;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  absl::StatusOr<std::string> transport = ClientTransport(options);
  if (!transport.ok()) return transport.status();
  ClientOptions resolved = options;
  resolved.transport = *std::move(transport);
  auto impl = std::make_unique<Impl>(resolved, MasterService::NewStub(MakeChannel(options.chief)));
  if (absl::Status s = impl->Connect(); !s.ok()) return s;
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

absl::StatusOr<int> Client::CreateVariable(const VariableOptions& v) {
  return impl_->CreateVariable(v);
}
absl::Status Client::Pull(std::vector<const float*>* values) { return impl_->Pull(values); }
absl::Status Client::Push(const std::vector<Tensor>& grads, int64_t examples,
                          std::optional<double> loss) {
  absl::StatusOr<std::vector<TensorView>> views = ViewsOf(grads);
  if (!views.ok()) return views.status();
  return impl_->Push(*views, examples, loss);
}
absl::Status Client::Push(const std::vector<TensorView>& grads, int64_t examples,
                          std::optional<double> loss) {
  return impl_->Push(grads, examples, loss);
}
PendingCall Client::PullAsync(std::vector<const float*>* values) {
  return impl_->PullAsync(values);
}
PendingCall Client::PushAsync(const std::vector<TensorView>& grads, int64_t examples,
                              std::optional<double> loss) {
  return impl_->PushAsync(grads, examples, loss);
}
absl::StatusOr<int> Client::CreateTable(const TableOptions& t) { return impl_->CreateTable(t); }
absl::Status Client::Lookup(const std::vector<std::vector<uint64_t>>& keys,
                            std::vector<const float*>* rows) {
  return impl_->Lookup(keys, rows);
}
absl::Status Client::PushSparse(const std::vector<std::vector<uint64_t>>& keys,
                                const std::vector<std::vector<float>>& grads, int64_t examples,
                                std::optional<double> loss) {
  return impl_->PushSparse(keys, grads, examples, loss);
}
int64_t Client::global_step() const { return impl_->global_step(); }
int64_t Client::pushes() const { return impl_->pushes(); }
absl::Status Client::Barrier(const std::string& name) { return impl_->Barrier(name); }
absl::Status Client::Done(const absl::Status& outcome) { return impl_->Done(outcome); }
const std::string& Client::mode() const { return impl_->mode(); }
std::vector<std::string> Client::data_plane() const { return impl_->data_plane(); }
int Client::num_ps() const { return impl_->num_ps(); }
int Client::num_workers() const { return impl_->num_workers(); }
absl::StatusOr<std::optional<Task>> Client::NextTask(int64_t batch_size) {
  return impl_->NextTask(batch_size);
}
absl::Status Client::TaskDone() { return impl_->TaskDone(); }
bool Client::has_tasks() const { return impl_->has_tasks(); }
bool Client::task_abandoned() const { return impl_->task_abandoned(); }

}  // namespace pstrain
