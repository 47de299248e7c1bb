// UcxServer (ucx.h): a UCP worker whose clients know its address from the DataPlane RPC. Each
// client says hello (token checked) with its own address, and the server connects back to it;
// each request is received into one buffer, parsed, handed to the DataHandler on a small pool
// of threads (the handler may apply an optimizer or wait), and answered over that connection.
#include <atomic>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "transport/buffer_pool.h"
#include "transport/ucx.h"
#include "transport/ucx_call.h"
#include "transport/ucx_wire.h"
#include "transport/ucx_worker.h"

namespace pstrain {
namespace {

// The server's endpoint to one client, made at its hello; `alive` is cleared (on the progress
// thread) when it fails.
struct Conn {
  ucp_ep_h ep = nullptr;
  uint64_t id = 0;  // the client's name for it (WireRequest::conn)
  bool alive = true;
};

class UcxServerImpl;

// Pushes up to this size are applied on the progress thread (an optimizer step over them is
// shorter than handing them to another thread); larger ones on the handler threads, so that
// the progress thread keeps receiving meanwhile.
constexpr size_t kInlinePushBytes = 256 << 10;

// One request from its arrival to its response's send.
struct ServerCall {
  UcxServerImpl* server = nullptr;
  std::shared_ptr<Conn> conn;
  WireRequest wire;
  BufferPool::Buffer data;  // head + tensor bytes
  size_t size = 0;
  PushRequest push;
  PushResponse push_resp;
  PullRequest pull;
  PullResponse pull_resp;
  std::vector<ConstBytes> grads;
  // Pulled value i: the variable's own floats, lent by the PS (DataHandler::PullSink) and held
  // by keeps[i] until the call ends.
  std::vector<const float*> values;
  std::vector<std::shared_ptr<const void>> keeps;
  std::vector<int64_t> counts;
  WireResponse out;
  std::string meta;  // status message + response head
  std::vector<ucp_dt_iov_t> iov;
};

class UcxServerImpl final : public UcxServer {
 public:
  UcxServerImpl(DataHandler* handler, std::unique_ptr<UcxWorker> worker)
      : handler_(handler), worker_(std::move(worker)), pool_(2) {}
  ~UcxServerImpl() override { Stop(); }

  absl::Status Serve();
  DataPlaneResponse data_plane() const override {
    DataPlaneResponse info;
    info.set_ucx_address(EncodeUcxAddress(HostBootId(), worker_->address()));
    return info;
  }
  void Stop() override;

 private:
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnRequest(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t Receive(std::shared_ptr<Conn> conn, const WireRequest& wire, void* data,
                       size_t length, const ucp_am_recv_param_t* param);
  void Hello(const WireRequest& wire, const void* address, size_t length, ucp_ep_h reply);
  void Dispatch(std::unique_ptr<ServerCall> call);
  void RunHandler(bool inline_call, std::function<void()> fn) {
    if (inline_call) return fn();
    pool_.Run(std::move(fn));
  }
  void Finish(ServerCall* call, const absl::Status& status);
  void SendResponse(std::unique_ptr<ServerCall> call);
  void Answer(std::shared_ptr<Conn> conn, uint64_t id, const absl::Status& status);
  void AnswerNow(ucp_ep_h reply, uint64_t id, const absl::Status& status);
  void CloseFailed();

  DataHandler* const handler_;
  std::unique_ptr<UcxWorker> worker_;
  UcxThreadPool pool_;
  // Progress thread only.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Conn>> conns_;  // by Conn::id
  absl::flat_hash_map<ucp_ep_h, uint64_t> conn_of_ep_;
  std::vector<ucp_ep_h> failed_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> stopped_{false};
};

absl::Status UcxServerImpl::Serve() {
  ucp_am_handler_param_t am = {};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kAmRequest;
  am.cb = &UcxServerImpl::OnRequest;
  am.arg = this;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  const ucs_status_t s = ucp_worker_set_am_recv_handler(worker_->worker(), &am);
  if (s != UCS_OK) return UcxError("UCX cannot set its message handler", s);
  worker_->Start([this] { CloseFailed(); }, [this] { return in_flight_ > 0; });
  return absl::OkStatus();
}

void UcxServerImpl::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxServerImpl*>(arg);
  auto it = self->conn_of_ep_.find(ep);
  if (it == self->conn_of_ep_.end()) return;
  spdlog::debug("UCX server: a connection ended: {}", ucs_status_string(status));
  auto conn = self->conns_.find(it->second);
  conn->second->alive = false;
  self->conns_.erase(conn);
  self->conn_of_ep_.erase(it);
  self->failed_.push_back(ep);  // closed from the tick, outside UCX's callback
}

void UcxServerImpl::CloseFailed() {
  for (ucp_ep_h ep : failed_) {
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);  // completes on its own; nothing waits for it
  }
  failed_.clear();
}

ucs_status_t UcxServerImpl::OnRequest(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxServerImpl*>(arg);
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  // The endpoint the request came on, for refusals only, and only within this callback: UCX
  // made it for the client's connection and destroys it when that fails, so it is not ours to
  // keep (answers to accepted requests travel over the server's own endpoint to the client).
  const ucp_ep_h reply =
      (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  auto refuse = [&](uint64_t id, const absl::Status& why) {
    if (rndv) ucp_am_data_release(self->worker_->worker(), data);
    if (reply != nullptr) self->AnswerNow(reply, id, why);
    return UCS_OK;
  };
  WireRequest wire;
  if (absl::Status s = CheckRequest(header, header_length, length, &wire); !s.ok()) {
    if (absl::IsUnauthenticated(s)) {
      spdlog::warn("UCX server: refused a request without the job's token");
    }
    return refuse(wire.id, s);
  }
  if (self->stopped_) return refuse(wire.id, absl::UnavailableError("the PS is stopping"));
  if (static_cast<WireMethod>(wire.method) == WireMethod::kHello) {
    if (rndv) return refuse(wire.id, absl::InvalidArgumentError("a UCX hello by rendezvous"));
    self->Hello(wire, data, length, reply);
    return UCS_OK;
  }
  auto it = self->conns_.find(wire.conn);
  if (it == self->conns_.end()) {
    return refuse(wire.id, absl::FailedPreconditionError(absl::StrCat(
                               "a UCX request on connection ", wire.conn,
                               ", which this PS does not know (no hello, or it failed)")));
  }
  return self->Receive(it->second, wire, data, length, param);
}

// A client's hello: connects back to its worker address, so that answers travel over an
// endpoint the server owns (and hears of the client's failure on).
void UcxServerImpl::Hello(const WireRequest& wire, const void* address, size_t length,
                          ucp_ep_h reply) {
  if (conns_.contains(wire.conn)) {
    if (reply != nullptr) {
      AnswerNow(reply, wire.id,
                absl::AlreadyExistsError(absl::StrCat("UCX connection ", wire.conn, " exists")));
    }
    return;
  }
  const std::string copy(static_cast<const char*>(address), length);  // aligned for UCX
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(copy.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxServerImpl::OnEpError;
  params.err_handler.arg = this;
  ucp_ep_h ep = nullptr;
  const ucs_status_t s = ucp_ep_create(worker_->worker(), &params, &ep);
  if (s != UCS_OK) {
    spdlog::warn("UCX server: cannot connect back to a client: {}", ucs_status_string(s));
    if (reply != nullptr) AnswerNow(reply, wire.id, UcxError("cannot connect back to you", s));
    return;
  }
  auto conn = std::make_shared<Conn>();
  conn->ep = ep;
  conn->id = wire.conn;
  conns_[wire.conn] = conn;
  conn_of_ep_[ep] = wire.conn;
  Answer(std::move(conn), wire.id, absl::OkStatus());
}

// A checked request on a known connection: received into a pooled buffer, then dispatched.
ucs_status_t UcxServerImpl::Receive(std::shared_ptr<Conn> conn, const WireRequest& wire, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  auto call = std::make_unique<ServerCall>();
  call->server = this;
  call->conn = std::move(conn);
  call->wire = wire;
  call->size = length;
  call->data = BufferPool::Shared().Get(static_cast<int64_t>(length));
  ++in_flight_;
  if (!rndv) {
    std::memcpy(call->data.data(), data, length);
    Dispatch(std::move(call));
    return UCS_OK;
  }
  ServerCall* raw = call.release();
  ucp_request_param_t p = {};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
    std::unique_ptr<ServerCall> call(static_cast<ServerCall*>(user));
    ucp_request_free(request);
    if (status != UCS_OK) {  // the connection failed under it: nobody to answer
      --call->server->in_flight_;
      return;
    }
    call->server->Dispatch(std::move(call));
  };
  p.user_data = raw;
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_->worker(), data, raw->data.data(), length, &p);
  if (r == nullptr) {
    Dispatch(std::unique_ptr<ServerCall>(raw));
  } else if (UCS_PTR_IS_ERR(r)) {
    --in_flight_;
    delete raw;
  }
  return UCS_OK;
}

void UcxServerImpl::Dispatch(std::unique_ptr<ServerCall> c) {
  ServerCall* call = c.release();
  if (absl::Status s = ParseRequest(call->wire, static_cast<const char*>(call->data.data()),
                                    call->size, &call->pull, &call->push, &call->grads);
      !s.ok()) {
    return Finish(call, s);
  }
  if (static_cast<WireMethod>(call->wire.method) == WireMethod::kPull) {
    call->values.resize(call->pull.names_size());
    call->keeps.resize(call->pull.names_size());
    call->counts.resize(call->pull.names_size());
    // Inline: a pull only takes the values (or waits without a thread, in sync and ssp), and
    // a small pull's round trip is mostly thread hand-offs.
    RunHandler(true, [call] {
      call->server->handler_->Pull(
          call->pull, &call->pull_resp,
          [call](int i, const float* v, int64_t n, const std::shared_ptr<const void>& keep) {
            if (i < 0 || i >= static_cast<int>(call->values.size()) || n < 0) {
              return absl::InternalError(absl::StrCat("pull sink index ", i, " out of range"));
            }
            call->values[i] = v;
            call->keeps[i] = keep;
            call->counts[i] = n;
            return absl::OkStatus();
          },
          [call](absl::Status s) { call->server->Finish(call, s); });
    });
    return;
  }
  RunHandler(call->size <= kInlinePushBytes, [call] {
    call->server->handler_->Push(call->push, call->grads, &call->push_resp,
                                 [call](absl::Status s) { call->server->Finish(call, s); });
  });
}

// Any thread: builds the response and hands it to the progress thread.
void UcxServerImpl::Finish(ServerCall* call, const absl::Status& status) {
  const auto method = static_cast<WireMethod>(call->wire.method);
  const bool pull = method == WireMethod::kPull;
  call->out.id = call->wire.id;
  call->out.code = static_cast<int32_t>(status.code());
  std::string head;
  uint64_t tensor_bytes = 0;
  if (status.ok() && method != WireMethod::kHello) {
    head = pull ? call->pull_resp.SerializeAsString() : call->push_resp.SerializeAsString();
  }
  call->meta = std::string(status.message().substr(0, kMaxWireHeadBytes));
  call->out.message_bytes = call->meta.size();
  call->out.head_bytes = head.size();
  call->meta += head;
  call->iov.push_back({call->meta.data(), call->meta.size()});
  if (status.ok() && pull) {
    for (size_t i = 0; i < call->values.size(); ++i) {
      const size_t n = call->counts[i] * sizeof(float);
      if (n > 0) call->iov.push_back({const_cast<float*>(call->values[i]), n});  // only read
      tensor_bytes += n;
    }
  }
  call->out.tensor_bytes = tensor_bytes;
  if (worker_->OnThread()) return SendResponse(std::unique_ptr<ServerCall>(call));
  worker_->Post([this, call] { SendResponse(std::unique_ptr<ServerCall>(call)); });
}

void UcxServerImpl::SendResponse(std::unique_ptr<ServerCall> call) {
  UcxServerImpl* self = call->server;
  if (!call->conn->alive) {
    --self->in_flight_;
    return;
  }
  ucp_request_param_t p = {};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  p.datatype = ucp_dt_make_iov();
  p.cb.send = [](void* request, ucs_status_t, void* user) {
    auto* call = static_cast<ServerCall*>(user);
    --call->server->in_flight_;
    delete call;
    ucp_request_free(request);
  };
  p.user_data = call.get();
  ucs_status_ptr_t r = ucp_am_send_nbx(call->conn->ep, kAmResponse, &call->out, sizeof(call->out),
                                       call->iov.data(), call->iov.size(), &p);
  if (UCS_PTR_IS_PTR(r)) {
    call.release();  // the callback owns it
    return;
  }
  --self->in_flight_;
}

// An answer with no head (to a hello, or to a request refused before it reached the handler).
void UcxServerImpl::Answer(std::shared_ptr<Conn> conn, uint64_t id, const absl::Status& status) {
  auto call = new ServerCall;
  call->server = this;
  call->conn = std::move(conn);
  call->wire.id = id;
  call->wire.method = static_cast<uint32_t>(WireMethod::kHello);
  ++in_flight_;
  Finish(call, status);
}

// A refusal over the endpoint the request came on, from within UCX's callback: Finish sends it
// before returning (on the progress thread), while that endpoint is sure to exist. A send UCX
// still holds when it destroys the endpoint ends with an error, which frees the call.
void UcxServerImpl::AnswerNow(ucp_ep_h reply, uint64_t id, const absl::Status& status) {
  auto conn = std::make_shared<Conn>();
  conn->ep = reply;
  Answer(std::move(conn), id, status);
}

void UcxServerImpl::Stop() {
  if (stopped_.exchange(true)) return;
  // Calls in flight end first (their handlers answer; a PS stopped before this ends its waits).
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (in_flight_ > 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(1));
  worker_->Run([this] {
    for (auto& [id, conn] : conns_) {
      conn->alive = false;
      failed_.push_back(conn->ep);
    }
    conns_.clear();
    conn_of_ep_.clear();
    CloseFailed();
  });
  worker_->Stop();
  pool_.Stop();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxServer>> UcxServer::Start(DataHandler* handler) {
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create("pstrain-ps");
  if (!worker.ok()) return worker.status();
  auto server = std::make_unique<UcxServerImpl>(handler, *std::move(worker));
  if (absl::Status s = server->Serve(); !s.ok()) return s;
  return server;
}

}  // namespace pstrain
