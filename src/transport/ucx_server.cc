// UcxServer (ucx.h): a UCP listener; each request is received into one buffer, parsed, handed to
// the DataHandler on a small pool of threads (the handler may apply an optimizer or wait), and
// answered over the connection it came on.
#include <netdb.h>
#include <sys/socket.h>

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

// A connection from one client; `alive` is cleared (on the progress thread) when it fails.
struct Conn {
  ucp_ep_h ep = nullptr;
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

  absl::Status Listen(const std::string& host);
  std::string address() const override { return address_; }
  void Stop() override;

 private:
  static void OnConnRequest(ucp_conn_request_h request, void* arg);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnRequest(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t Receive(std::shared_ptr<Conn> conn, const void* header, size_t header_length,
                       void* data, size_t length, const ucp_am_recv_param_t* param);
  void Dispatch(std::unique_ptr<ServerCall> call);
  void RunHandler(bool inline_call, std::function<void()> fn) {
    if (inline_call) return fn();
    pool_.Run(std::move(fn));
  }
  void Finish(ServerCall* call, const absl::Status& status);
  void SendResponse(std::unique_ptr<ServerCall> call);
  void Answer(std::shared_ptr<Conn> conn, uint64_t id, const absl::Status& status);
  void CloseFailed();

  DataHandler* const handler_;
  std::unique_ptr<UcxWorker> worker_;
  UcxThreadPool pool_;
  ucp_listener_h listener_ = nullptr;
  std::string address_;
  // Progress thread only.
  absl::flat_hash_map<ucp_ep_h, std::shared_ptr<Conn>> conns_;
  std::vector<ucp_ep_h> failed_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> stopped_{false};
};

absl::Status UcxServerImpl::Listen(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string bare =
      host.size() >= 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
  if (int e = getaddrinfo(bare.c_str(), "0", &hints, &found); e != 0) {
    return absl::UnavailableError(
        absl::StrCat("UCX cannot listen on \"", host, "\": ", gai_strerror(e)));
  }
  ucp_listener_params_t params = {};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = found->ai_addr;
  params.sockaddr.addrlen = found->ai_addrlen;
  params.conn_handler.cb = &UcxServerImpl::OnConnRequest;
  params.conn_handler.arg = this;
  ucs_status_t s = ucp_listener_create(worker_->worker(), &params, &listener_);
  freeaddrinfo(found);
  if (s != UCS_OK) return UcxError(absl::StrCat("UCX cannot listen on ", host), s);
  ucp_listener_attr_t attr = {};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  s = ucp_listener_query(listener_, &attr);
  if (s != UCS_OK) return UcxError("UCX cannot query its listener", s);
  // Advertise the numeric address bound, so that clients reach this very listener whatever
  // their resolver makes of the host's name.
  char ip[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&attr.sockaddr), sizeof(attr.sockaddr), ip,
                  sizeof(ip), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return absl::UnavailableError(absl::StrCat("UCX listens on ", host, " at an unknown port"));
  }
  const bool v6 = std::strchr(ip, ':') != nullptr;
  address_ = absl::StrCat(v6 ? "[" : "", ip, v6 ? "]:" : ":", port);

  ucp_am_handler_param_t am = {};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kAmRequest;
  am.cb = &UcxServerImpl::OnRequest;
  am.arg = this;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  s = ucp_worker_set_am_recv_handler(worker_->worker(), &am);
  if (s != UCS_OK) return UcxError("UCX cannot set its message handler", s);
  worker_->Start([this] { CloseFailed(); }, [this] { return in_flight_ > 0; });
  return absl::OkStatus();
}

void UcxServerImpl::OnConnRequest(ucp_conn_request_h request, void* arg) {
  auto* self = static_cast<UcxServerImpl*>(arg);
  if (self->stopped_) {
    ucp_listener_reject(self->listener_, request);
    return;
  }
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.conn_request = request;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxServerImpl::OnEpError;
  params.err_handler.arg = self;
  ucp_ep_h ep = nullptr;
  const ucs_status_t s = ucp_ep_create(self->worker_->worker(), &params, &ep);
  if (s != UCS_OK) {
    spdlog::warn("UCX server {}: cannot accept a connection: {}", self->address_,
                 ucs_status_string(s));
    return;
  }
  auto conn = std::make_shared<Conn>();
  conn->ep = ep;
  self->conns_[ep] = std::move(conn);
}

void UcxServerImpl::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxServerImpl*>(arg);
  auto it = self->conns_.find(ep);
  if (it == self->conns_.end()) return;
  spdlog::debug("UCX server {}: a connection ended: {}", self->address_, ucs_status_string(status));
  it->second->alive = false;
  self->conns_.erase(it);
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
  std::shared_ptr<Conn> conn;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
    auto it = self->conns_.find(param->reply_ep);
    if (it != self->conns_.end()) conn = it->second;
  }
  if (conn == nullptr || self->stopped_) {  // nowhere to answer: drop it
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
      ucp_am_data_release(self->worker_->worker(), data);
    return UCS_OK;
  }
  return self->Receive(std::move(conn), header, header_length, data, length, param);
}

ucs_status_t UcxServerImpl::Receive(std::shared_ptr<Conn> conn, const void* header,
                                    size_t header_length, void* data, size_t length,
                                    const ucp_am_recv_param_t* param) {
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  auto refuse = [&](uint64_t id, const absl::Status& why) {
    if (rndv) ucp_am_data_release(worker_->worker(), data);
    Answer(conn, id, why);
    return UCS_OK;
  };
  WireRequest wire;
  if (absl::Status s = CheckRequest(header, header_length, length, &wire); !s.ok()) {
    if (absl::IsUnauthenticated(s)) {
      spdlog::warn("UCX server {}: refused a request without the job's token", address_);
    }
    return refuse(wire.id, s);
  }
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
  const char* head = static_cast<const char*>(call->data.data());
  if (static_cast<WireMethod>(call->wire.method) == WireMethod::kPull) {
    if (!call->pull.ParseFromArray(head, call->wire.head_bytes)) {
      return Finish(call,
                    absl::InvalidArgumentError("a UCX Pull whose PullRequest does not parse"));
    }
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
  if (!call->push.ParseFromArray(head, call->wire.head_bytes)) {
    return Finish(call, absl::InvalidArgumentError("a UCX Push whose PushRequest does not parse"));
  }
  absl::Status s = SplitTensorBytes(call->push, head + call->wire.head_bytes,
                                    call->size - call->wire.head_bytes, &call->grads);
  if (!s.ok()) return Finish(call, s);
  RunHandler(call->size <= kInlinePushBytes, [call] {
    call->server->handler_->Push(call->push, call->grads, &call->push_resp,
                                 [call](absl::Status s) { call->server->Finish(call, s); });
  });
}

// Any thread: builds the response and hands it to the progress thread.
void UcxServerImpl::Finish(ServerCall* call, const absl::Status& status) {
  const bool pull = static_cast<WireMethod>(call->wire.method) == WireMethod::kPull;
  call->out.id = call->wire.id;
  call->out.code = static_cast<int32_t>(status.code());
  std::string head;
  uint64_t tensor_bytes = 0;
  if (status.ok()) {
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

// An answer with no head, to a request refused before it reached the handler.
void UcxServerImpl::Answer(std::shared_ptr<Conn> conn, uint64_t id, const absl::Status& status) {
  auto call = new ServerCall;
  call->server = this;
  call->conn = std::move(conn);
  call->wire.id = id;
  call->wire.method = 0;
  ++in_flight_;
  Finish(call, status);
}

void UcxServerImpl::Stop() {
  if (stopped_.exchange(true)) return;
  // Calls in flight end first (their handlers answer; a PS stopped before this ends its waits).
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (in_flight_ > 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(1));
  worker_->Run([this] {
    if (listener_ != nullptr) ucp_listener_destroy(listener_);
    listener_ = nullptr;
    for (auto& [ep, conn] : conns_) {
      conn->alive = false;
      failed_.push_back(ep);
    }
    conns_.clear();
    CloseFailed();
  });
  worker_->Stop();
  pool_.Stop();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxServer>> UcxServer::Start(DataHandler* handler,
                                                            const std::string& host) {
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create("pstrain-ps");
  if (!worker.ok()) return worker.status();
  auto server = std::make_unique<UcxServerImpl>(handler, *std::move(worker));
  if (absl::Status s = server->Listen(host); !s.ok()) return s;
  return server;
}

}  // namespace pstrain
