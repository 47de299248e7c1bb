// The UCX PS end against raw UCP active messages (ucx_wire.h): each malformed request is
// answered INVALID_ARGUMENT naming what is wrong, a request before the hello or a hello without
// the token is refused, nothing reaches the PS, and the server goes on serving well-formed
// calls, also after a client vanished in the middle of one.
#include <cstring>

#include "common/security.h"
#include "gmock/gmock.h"
#include "transport/ucx_wire.h"
#include "transport/ucx_worker.h"
#include "transport_ucx_testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace ucx_testing;  // NOLINT: the helpers of this test

constexpr uint64_t kConn = 77;

std::string Header(WireMethod method, size_t head_bytes, uint32_t magic = kWireMagic,
                   const std::string& token = "") {
  WireRequest wire;
  wire.magic = magic;
  wire.method = static_cast<uint32_t>(method);
  wire.id = 1;
  wire.conn = kConn;
  wire.token_bytes = token.size();
  wire.head_bytes = head_bytes;
  return std::string(reinterpret_cast<const char*>(&wire), sizeof(wire)) + token;
}

// A bare UCP client: sends one request of its own making and returns the answer's status.
class RawClient {
 public:
  // Connects to the PS's worker and, with `hello`, says hello as connection kConn.
  explicit RawClient(const DataPlaneResponse& served, bool hello = true) {
    worker_ = *UcxWorker::Create("raw-client");
    ucp_am_handler_param_t am = {};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    am.id = kAmResponse;
    am.flags = UCP_AM_FLAG_WHOLE_MSG;
    am.arg = this;
    am.cb = [](void* arg, const void* header, size_t, void* data, size_t length,
               const ucp_am_recv_param_t* param) -> ucs_status_t {
      auto* self = static_cast<RawClient*>(arg);
      WireResponse wire;
      std::memcpy(&wire, header, sizeof(wire));
      // Answers to bad requests are small: eager, their data valid during this call.
      const bool eager = !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
      self->answer_ = absl::Status(
          static_cast<absl::StatusCode>(wire.code),
          eager ? std::string(static_cast<const char*>(data), wire.message_bytes) : "(rndv)");
      self->answered_->Notify();
      return UCS_OK;
    };
    EXPECT_EQ(ucp_worker_set_am_recv_handler(worker_->worker(), &am), UCS_OK);
    worker_->Start([] {}, [] { return true; });
    std::string host, address;
    EXPECT_TRUE(DecodeUcxAddress(served.ucx_address(), &host, &address).ok());
    worker_->Run([&] {
      ucp_ep_params_t p = {};
      p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      p.address = reinterpret_cast<const ucp_address_t*>(address.data());
      p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      EXPECT_EQ(ucp_ep_create(worker_->worker(), &p, &ep_), UCS_OK);
    });
    if (hello) {
      absl::Status s = Hello(GetSecurity()->token);
      EXPECT_TRUE(s.ok()) << s;
    }
  }
  absl::Status Hello(const std::string& token) {
    return Send(Header(WireMethod::kHello, worker_->address().size(), kWireMagic, token),
                worker_->address());
  }
  ~RawClient() {
    worker_->Run([&] {
      ucp_request_param_t p = {};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
      if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
    });
    worker_->Stop();
  }

  // `header` (WireRequest and whatever follows it) and `data`, as one request.
  absl::Status Send(const std::string& header, const std::string& data) {
    Start(header, data, UCP_AM_SEND_FLAG_EAGER);
    if (!answered_->WaitForNotificationWithTimeout(absl::Seconds(20))) {
      return absl::InternalError("no answer");
    }
    return answer_;
  }
  // Starts sending `data` by rendezvous and returns at once; `data` must outlive the client.
  void StartRendezvous(const std::string& header, const std::string& data) {
    Start(header, data, UCP_AM_SEND_FLAG_RNDV);
  }

 private:
  void Start(const std::string& header, const std::string& data, uint32_t protocol) {
    answered_ = std::make_unique<absl::Notification>();
    worker_->Run([&] {
      ucp_request_param_t p = {};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_REPLY | protocol;
      ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kAmRequest, header.data(), header.size(),
                                           data.data(), data.size(), &p);
      if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);  // completes (or fails) on its own
    });
  }

  std::unique_ptr<UcxWorker> worker_;
  ucp_ep_h ep_ = nullptr;
  std::unique_ptr<absl::Notification> answered_;
  absl::Status answer_;
};

std::string PushHead(int64_t dim) {
  PushRequest req;
  *req.mutable_sender() = MakeSender("worker", 0);
  Gradient* g = req.add_gradients();
  g->set_name("w");
  g->mutable_gradient()->set_dtype(DT_FLOAT);
  g->mutable_gradient()->add_shape(dim);
  return req.SerializeAsString();
}

TEST(UcxWire, MalformedRequestsAreRefusedAndNothingApplied) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.Create("w", Tensor(std::vector<int64_t>{4}, 1.0f), 1.0);
  RawClient raw(ps.served);
  const std::string grad(16, '\x01');
  struct Case {
    std::string header, data, says;
  };
  const std::string head = PushHead(4);
  const std::vector<Case> cases = {
      {Header(WireMethod::kPush, 9), "not a protobuf at all" + grad, "does not parse"},
      {Header(WireMethod::kPush, head.size()), head + grad.substr(0, 8), "needs 16 bytes"},
      {Header(WireMethod::kPush, head.size()), head + grad + "xx", "tensor bytes"},
      {Header(WireMethod::kPush, PushHead(-4).size()), PushHead(-4), "negative"},
      {Header(WireMethod::kPush, 1000), head, "with a head of 1000"},
      {Header(static_cast<WireMethod>(9), head.size()), head + grad, "unknown data-plane request method"},
      {Header(WireMethod::kPush, head.size(), 0x1234), head + grad, "malformed header"},
      {Header(WireMethod::kPull, 4), "\xff\xff\xff\xff", "PullRequest does not parse"},
  };
  for (const Case& c : cases) {
    absl::Status s = raw.Send(c.header, c.data);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
  }
  EXPECT_EQ(ps.Value("w"), std::vector<float>(4, 1.0f));
  // The well-formed request of the same bytes is applied: the server still serves.
  std::vector<float> ones(4, 1.0f);
  std::string bytes(reinterpret_cast<const char*>(ones.data()), 16);
  absl::Status s = raw.Send(Header(WireMethod::kPush, head.size()), head + bytes);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ps.Value("w"), std::vector<float>(4, 0.0f));
}

// Requests are answered over the endpoint the PS made at the client's hello; before it, or
// with a hello the PS refused, a request is refused over the endpoint it came on.
TEST(UcxWire, NoRequestIsServedBeforeAHelloWithTheToken) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  ps.Create("w", Tensor(std::vector<int64_t>{4}, 1.0f), 1.0);
  SetSecurity({.token = "secret"});
  RawClient raw(ps.served, /*hello=*/false);
  const std::string head = PushHead(4);
  std::vector<float> ones(4, 1.0f);
  const std::string push = head + std::string(reinterpret_cast<const char*>(ones.data()), 16);
  absl::Status s = raw.Send(Header(WireMethod::kPush, head.size(), kWireMagic, "secret"), push);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("does not know"));
  s = raw.Hello("");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  s = raw.Hello("wrong");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  s = raw.Send(Header(WireMethod::kHello, 0, kWireMagic, "secret"), "");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = raw.Send(Header(WireMethod::kPush, head.size(), kWireMagic, "secret"), push);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(ps.Value("w"), std::vector<float>(4, 1.0f));
  ASSERT_TRUE(raw.Hello("secret").ok());
  s = raw.Send(Header(WireMethod::kPush, head.size(), kWireMagic, "secret"), push);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(raw.Hello("secret").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ps.Value("w"), std::vector<float>(4, 0.0f));
  SetSecurity({});
}

// A client that vanishes while the PS is fetching its push (its connection torn down mid
// rendezvous): the PS drops that request, applies nothing of it, and serves the next client.
TEST(UcxWire, AClientGoneMidPushLeavesThePsServing) {
  LocalPs ps;
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  const int64_t n = 4 << 20;
  ps.Create("w", Tensor(std::vector<int64_t>{n}, 1.0f), 1.0);
  const std::string head = PushHead(n);
  const std::string data = head + std::string(n * 4, '\0');
  {
    RawClient raw(ps.served);
    raw.StartRendezvous(Header(WireMethod::kPush, head.size()), data);
  }  // closed by force at once
  absl::StatusOr<std::unique_ptr<DataChannel>> ch = MakeUcxDataChannel(ps.address);
  ASSERT_TRUE(ch.ok()) << ch.status();
  std::vector<float> v(n);
  PullResponse pulled;
  absl::Status s = PullFloats(ch->get(), {"w"}, {&v}, &pulled);
  ASSERT_TRUE(s.ok()) << s;
  // Zero gradients: applied or not, the value stays; the version says which.
  EXPECT_EQ(v, std::vector<float>(n, 1.0f));
  EXPECT_LE(pulled.values(0).version(), 1u);
}

}  // namespace
}  // namespace pstrain
