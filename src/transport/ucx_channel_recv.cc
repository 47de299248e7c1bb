// The UCX DataChannel's responses (ucx_channel.h): received straight into the caller's buffers,
// and the calls' ends (answers, deadlines, cancels, failed connections).
#include <cstring>
#include <utility>

#include "absl/time/clock.h"
#include "transport/ucx_call.h"
#include "transport/ucx_channel.h"

namespace pstrain::ucx_internal {

void UcxChannel::Expire(ClientCall* c) {
  const bool cancelled = c->canceller != nullptr && c->canceller->cancelled();
  c->Fail(Error(*c, cancelled ? absl::StatusCode::kCancelled : absl::StatusCode::kDeadlineExceeded,
                cancelled ? "cancelled" : "deadline exceeded"));
  MaybeFinish(c);
}

// Runs `done` once nothing of UCX's touches the call's buffers any more.
void UcxChannel::MaybeFinish(ClientCall* c) {
  if (c->send_req != nullptr || c->recv_req != nullptr) return;
  if (!c->answered && !c->failed) return;
  auto it = calls_.find(c->id);
  std::unique_ptr<ClientCall> owned = std::move(it->second);
  calls_.erase(it);
  dones_.Run([c = owned.release()] {
    std::unique_ptr<ClientCall> call(c);
    call->done(call->result);
  });
}

ucs_status_t UcxChannel::OnResponse(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxChannel*>(arg);
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  WireResponse wire;
  ClientCall* c = nullptr;
  if (header_length == sizeof(wire)) {
    std::memcpy(&wire, header, sizeof(wire));
    auto it = self->calls_.find(wire.id);
    if (wire.magic == kWireMagic && it != self->calls_.end()) c = it->second.get();
  }
  // Not for a call still waiting (one ended by its deadline, or garbage): dropped.
  if (c == nullptr || c->failed || c->answered || c->recv_req != nullptr) {
    if (rndv) ucp_am_data_release(self->worker_->worker(), data);
    return UCS_OK;
  }
  c->wire = wire;
  const uint64_t meta = uint64_t{wire.message_bytes} + wire.head_bytes;
  if (wire.message_bytes > kMaxWireHeadBytes || wire.head_bytes > kMaxWireHeadBytes ||
      length != meta + wire.tensor_bytes) {
    if (rndv) ucp_am_data_release(self->worker_->worker(), data);
    c->Fail(self->Error(*c, absl::StatusCode::kInternal, "a malformed UCX response"));
    self->MaybeFinish(c);
    return UCS_OK;
  }
  // Where the bytes go: the message and head into `meta`, each value into its dest, unless
  // the sizes disagree (then all into `meta`, to name the variable at fault).
  std::vector<ucp_dt_iov_t> iov;
  uint64_t dest_bytes = 0;
  for (const MutableBytes& d : c->dest) dest_bytes += d.size;
  c->scratch = wire.code == 0 && c->method == WireMethod::kPull && dest_bytes != wire.tensor_bytes;
  c->meta.resize(c->scratch ? length : meta);
  iov.push_back({c->meta.data(), c->meta.size()});
  if (!c->scratch && wire.code == 0) {
    for (const MutableBytes& d : c->dest) {
      if (d.size > 0) iov.push_back({d.data, size_t(d.size)});
    }
  }
  if (!rndv) {
    const char* from = static_cast<const char*>(data);
    for (const ucp_dt_iov_t& v : iov) {
      std::memcpy(v.buffer, from, v.length);
      from += v.length;
    }
    self->Received(c, UCS_OK);
    return UCS_OK;
  }
  c->recv_iov = std::move(iov);
  ucp_request_param_t p = {};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  const bool one = c->recv_iov.size() == 1;
  p.datatype = one ? ucp_dt_make_contig(1) : ucp_dt_make_iov();
  p.user_data = c;
  p.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
    auto* c = static_cast<ClientCall*>(user);
    ucp_request_free(request);
    c->recv_req = nullptr;
    c->owner->Received(c, status);
  };
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(self->worker_->worker(), data,
                                            one ? c->recv_iov[0].buffer : c->recv_iov.data(),
                                            one ? c->recv_iov[0].length : c->recv_iov.size(), &p);
  if (UCS_PTR_IS_PTR(r)) {
    c->recv_req = r;
  } else {
    self->Received(c, UCS_PTR_STATUS(r));
  }
  return UCS_OK;
}

void UcxChannel::Received(ClientCall* c, ucs_status_t status) {
  if (status != UCS_OK) {
    c->Fail(Error(*c, absl::StatusCode::kUnavailable,
                  absl::StrCat("UCX could not receive: ", ucs_status_string(status))));
    return MaybeFinish(c);
  }
  if (c->failed) return MaybeFinish(c);  // past its deadline while receiving
  const absl::string_view message(c->meta.data(), c->wire.message_bytes);
  const char* head = c->meta.data() + c->wire.message_bytes;
  absl::Status s;
  if (c->wire.code != 0) {
    s = Error(*c, static_cast<absl::StatusCode>(c->wire.code), message);
  } else if (c->method == WireMethod::kHello) {
    // The PS connected back: nothing more to read.
  } else if (c->method == WireMethod::kPush) {
    if (!c->push_resp->ParseFromArray(head, c->wire.head_bytes)) {
      s = Error(*c, absl::StatusCode::kInternal, "a PushResponse that does not parse");
    }
  } else if (!c->pull_resp->ParseFromArray(head, c->wire.head_bytes)) {
    s = Error(*c, absl::StatusCode::kInternal, "a PullResponse that does not parse");
  } else if (c->pull_resp->values_size() != static_cast<int>(c->dest.size())) {
    s = Error(*c, absl::StatusCode::kInvalidArgument,
              absl::StrCat("the PS answered ", c->pull_resp->values_size(), " values for ",
                           c->dest.size(), " buffers"));
  } else {
    for (int i = 0; i < c->pull_resp->values_size() && s.ok(); ++i) {
      const VariableValue& v = c->pull_resp->values(i);
      absl::StatusOr<int64_t> n = TensorBytes(v.value(), v.name());
      if (n.ok() && *n != c->dest[i].size) {
        n = absl::InvalidArgumentError(absl::StrCat("variable \"", v.name(), "\" has ", *n,
                                                    " bytes; its buffer holds ", c->dest[i].size));
      }
      if (!n.ok()) s = Error(*c, n.status().code(), n.status().message());
    }
    if (s.ok() && c->scratch) {
      s = Error(*c, absl::StatusCode::kInternal, "the PS answered more bytes than its values");
    }
  }
  c->answered = true;
  c->result = s;
  MaybeFinish(c);
}

void UcxChannel::FailAll(const absl::Status& why) {
  std::vector<ClientCall*> all;
  for (auto& [id, c] : calls_) all.push_back(c.get());
  for (ClientCall* c : all) {
    c->Fail(Error(*c, why.code(), why.message()));
    MaybeFinish(c);
  }
}

void UcxChannel::Tick() {
  if (ep_failed_) CloseEp();
  const absl::Time now = absl::Now();
  std::vector<ClientCall*> expired;
  bool abandon = false;
  for (auto& [id, c] : calls_) {
    if (!c->failed && !c->answered &&
        (now >= c->deadline || (c->canceller != nullptr && c->canceller->cancelled()))) {
      expired.push_back(c.get());
    } else if (c->failed && now >= c->deadline + kAbandonGrace) {
      abandon = true;  // UCX still holds its buffers long past its deadline
    }
  }
  for (ClientCall* c : expired) Expire(c);
  if (abandon) CloseEp();
}

}  // namespace pstrain::ucx_internal
