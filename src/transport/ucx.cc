// The UCX DataChannel (ucx.h): one UCP worker and its progress thread per channel; calls are
// handed to that thread, sent as one active message each (the tensors from their own memory),
// and answered by one active message received straight into the caller's buffers.
#include "transport/ucx.h"

#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/security.h"
#include "ps.grpc.pb.h"
#include "transport/ucx_call.h"
#include "transport/ucx_channel.h"

namespace pstrain {
namespace ucx_internal {

absl::Status UcxChannel::Connect() {
  if (sizeof(WireRequest) + token_.size() > worker_->max_am_header()) {
    return absl::InvalidArgumentError(absl::StrCat("the job token (", token_.size(),
                                                   " bytes) does not fit UCX's message header (",
                                                   worker_->max_am_header(), " bytes)"));
  }
  ucp_am_handler_param_t am = {};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kAmResponse;
  am.cb = &UcxChannel::OnResponse;
  am.arg = this;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucs_status_t set = ucp_worker_set_am_recv_handler(worker_->worker(), &am);
  if (set != UCS_OK) return UcxError("UCX cannot set its message handler", set);
  worker_->Start([this] { Tick(); }, [this] { return !calls_.empty(); });
  // The hello is answered once the PS connected back to this worker: both directions work, so
  // an unreachable PS is an error here rather than at the first call.
  absl::Notification said;
  absl::Status hello;
  auto done = [&](absl::Status s) {
    hello = std::move(s);
    said.Notify();
  };
  absl::Status made;
  worker_->Run([&] { made = EnsureEp(done); });
  if (!made.ok()) return made;
  said.WaitForNotification();  // the hello's deadline bounds this wait
  if (absl::IsDeadlineExceeded(hello)) {
    return absl::UnavailableError(absl::StrCat("the PS at ", address_,
                                               " did not answer over UCX within ",
                                               absl::FormatDuration(kConnectTimeout)));
  }
  return hello;
}

UcxChannel::~UcxChannel() {
  worker_->Run([this] {
    FailAll(absl::CancelledError("the UCX channel was closed"));
    CloseEp();  // ends the requests still in flight
  });
  const absl::Time end = absl::Now() + kAbandonGrace;
  bool empty = false;
  while (!empty && absl::Now() < end) {
    worker_->Run([&] { empty = calls_.empty(); });
    if (!empty) absl::SleepFor(absl::Milliseconds(1));
  }
  worker_->Stop();
  dones_.Stop();  // the last `done`s run before the channel is gone
}

absl::Status UcxChannel::EnsureEp(DoneFn hello_done) {
  if (ep_ != nullptr) return absl::OkStatus();
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(ps_worker_.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = [](void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<UcxChannel*>(arg);
    if (ep != self->ep_) return;
    self->ep_failed_ = true;
    self->FailAll(UcxError("the UCX connection failed", status));
  };
  params.err_handler.arg = this;
  const ucs_status_t s = ucp_ep_create(worker_->worker(), &params, &ep_);
  if (s != UCS_OK) {
    ep_ = nullptr;
    if (s == UCS_ERR_UNREACHABLE) {
      return absl::FailedPreconditionError(
          absl::StrCat("UCX cannot reach the PS at ", address_, " (", ucs_status_string(s),
                       "): UCX in pstrain carries only same-host traffic, over shared memory"));
    }
    return UcxError(absl::StrCat("UCX cannot connect to the PS at ", address_), s);
  }
  ep_failed_ = false;
  static thread_local std::mt19937_64 random{std::random_device{}()};
  conn_ = random();
  // The hello goes first on the new endpoint; UCX keeps the order of one endpoint's messages,
  // so the PS knows the connection before the calls that follow.
  auto hello = std::make_unique<ClientCall>();
  hello->method = WireMethod::kHello;
  hello->deadline = absl::Now() + kConnectTimeout;
  hello->done = std::move(hello_done);
  hello->head = worker_->address();
  Prepare(hello.get());
  Start(std::move(hello));
  return absl::OkStatus();
}

void UcxChannel::CloseEp() {
  if (ep_ == nullptr) return;
  ucp_request_param_t p = {};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
  if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
  ep_ = nullptr;
}

void UcxChannel::Prepare(ClientCall* call) const {
  WireRequest wire;
  wire.method = static_cast<uint32_t>(call->method);
  wire.token_bytes = token_.size();
  wire.head_bytes = call->head.size();
  call->header.assign(reinterpret_cast<const char*>(&wire), sizeof(wire));
  call->header += token_;
  call->send_iov.push_back({call->head.data(), call->head.size()});
  for (const ConstBytes& g : call->grads) {
    if (g.size > 0) call->send_iov.push_back({const_cast<void*>(g.data), size_t(g.size)});
  }
}

void UcxChannel::Submit(std::unique_ptr<ClientCall> call, const CallOptions& options) {
  call->deadline = options.deadline;
  call->canceller = options.canceller;
  Prepare(call.get());
  worker_->Post([this, c = call.release()] { Start(std::unique_ptr<ClientCall>(c)); });
}

void UcxChannel::Push(const CallOptions& options, const PushRequest& head,
                      std::vector<ConstBytes> grads, PushResponse* resp, DoneFn done) {
  auto call = std::make_unique<ClientCall>();
  call->method = WireMethod::kPush;
  if (static_cast<int>(grads.size()) != head.gradients_size()) {
    return done(
        Error(*call, absl::StatusCode::kInvalidArgument,
              absl::StrCat(head.gradients_size(), " gradients with ", grads.size(), " buffers")));
  }
  for (int i = 0; i < head.gradients_size(); ++i) {
    const Gradient& g = head.gradients(i);
    absl::StatusOr<int64_t> n = TensorBytes(g.gradient(), g.name());
    if (n.ok() && *n != grads[i].size) {
      n = absl::InvalidArgumentError(absl::StrCat("gradient \"", g.name(), "\" needs ", *n,
                                                  " bytes; its buffer holds ", grads[i].size));
    }
    if (!n.ok()) return done(Error(*call, n.status().code(), n.status().message()));
  }
  call->push_resp = resp;
  call->done = std::move(done);
  call->head = head.SerializeAsString();
  call->grads = std::move(grads);
  Submit(std::move(call), options);
}

void UcxChannel::Pull(const CallOptions& options, const PullRequest& req,
                      std::vector<MutableBytes> dest, PullResponse* resp, DoneFn done) {
  auto call = std::make_unique<ClientCall>();
  call->method = WireMethod::kPull;
  call->pull_resp = resp;
  call->done = std::move(done);
  call->head = req.SerializeAsString();
  call->dest = std::move(dest);
  Submit(std::move(call), options);
}

void UcxChannel::Start(std::unique_ptr<ClientCall> call) {
  ClientCall* c = call.get();
  c->owner = this;
  c->id = next_id_++;
  calls_[c->id] = std::move(call);
  if (absl::Now() >= c->deadline || (c->canceller != nullptr && c->canceller->cancelled())) {
    return Expire(c);
  }
  if (absl::Status s = EnsureEp(); !s.ok()) {
    c->Fail(Error(*c, s.code(), s.message()));
    return MaybeFinish(c);
  }
  WireRequest wire;
  std::memcpy(&wire, c->header.data(), sizeof(wire));
  wire.id = c->id;
  wire.conn = conn_;
  std::memcpy(c->header.data(), &wire, sizeof(wire));
  ucp_request_param_t p = {};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  // REPLY: the PS answers a refused request (no hello, no token) over the endpoint it came on.
  // A hello is small, and eager: the PS reads it within its callback.
  p.flags = UCP_AM_SEND_FLAG_REPLY | (c->method == WireMethod::kHello ? UCP_AM_SEND_FLAG_EAGER : 0);
  p.datatype = ucp_dt_make_iov();
  p.user_data = c;
  p.cb.send = [](void* request, ucs_status_t status, void* user) {
    auto* c = static_cast<ClientCall*>(user);
    ucp_request_free(request);
    c->send_req = nullptr;
    if (status != UCS_OK) {
      c->Fail(c->owner->Error(*c, absl::StatusCode::kUnavailable,
                              absl::StrCat("UCX could not send: ", ucs_status_string(status))));
    }
    c->owner->MaybeFinish(c);
  };
  ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kAmRequest, c->header.data(), c->header.size(),
                                       c->send_iov.data(), c->send_iov.size(), &p);
  if (UCS_PTR_IS_PTR(r)) {
    c->send_req = r;
  } else if (UCS_PTR_IS_ERR(r)) {
    c->Fail(Error(*c, absl::StatusCode::kUnavailable,
                  absl::StrCat("UCX could not send: ", ucs_status_string(UCS_PTR_STATUS(r)))));
    MaybeFinish(c);
  }
}

}  // namespace ucx_internal

absl::StatusOr<std::unique_ptr<DataChannel>> MakeUcxDataChannel(const std::string& address) {
  auto stub = ParameterServerService::NewStub(MakeChannel(address));
  DataPlaneRequest req;
  DataPlaneResponse resp;
  absl::Status s = FromGrpcStatus(
      stub->DataPlane(
          ContextWithTimeout(ucx_internal::kConnectTimeout, /*wait_for_ready=*/true).get(), req,
          &resp),
      "DataPlane", address);
  if (!s.ok()) return s;
  if (resp.ucx_address().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the PS at ", address, " serves no UCX data plane (it runs with --transport grpc)"));
  }
  std::string host, ps_worker;
  if (absl::Status d = DecodeUcxAddress(resp.ucx_address(), &host, &ps_worker); !d.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the PS at ", address, " announces no UCX worker this version can use: ", d.message()));
  }
  if (host != HostBootId()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the PS at ", address,
                     " runs on another host, and UCX in pstrain carries only same-host traffic "
                     "(shared memory): use --transport grpc, or auto"));
  }
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create("pstrain-client");
  if (!worker.ok()) return worker.status();
  auto channel = std::make_unique<ucx_internal::UcxChannel>(address, ps_worker, *std::move(worker));
  if (absl::Status c = channel->Connect(); !c.ok()) return c;
  return channel;
}

}  // namespace pstrain
