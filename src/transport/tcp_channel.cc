// The TCP DataChannel (tcp.h MakeTcpDataChannel). Each call is taken by one of the channel's
// connection threads, each with a connection of its own (made on first use, and again after a
// failure), which sends the request from the caller's buffers and reads the answer's tensors
// straight into the caller's destinations. A thread is added when a call finds none idle, up to
// kMaxConnections; further calls wait their turn.
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "common/security.h"
#include "ps.grpc.pb.h"
#include "transport/tcp.h"
#include "transport/tcp_socket.h"
#include "transport/tcp_wire.h"
#include "transport/ucx_call.h"

namespace pstrain {
namespace {

constexpr absl::Duration kConnectTimeout = absl::Seconds(10);
constexpr int kMaxConnections = 8;

struct Call {
  WireMethod method = WireMethod::kPush;
  CallOptions options;
  std::string head;                // the serialized PushRequest or PullRequest
  std::vector<ConstBytes> grads;   // a push's
  std::vector<MutableBytes> dest;  // a pull's
  PushResponse* push_resp = nullptr;
  PullResponse* pull_resp = nullptr;
  DoneFn done;

  const char* what() const { return method == WireMethod::kPush ? "Push" : "Pull"; }
};

class TcpChannel final : public DataChannel {
 public:
  TcpChannel(std::string address, std::string host, int port)
      : address_(std::move(address)),
        host_(std::move(host)),
        port_(port),
        token_(GetSecurity()->token) {}
  ~TcpChannel() override;

  // Makes the first connection, so that a PS that cannot be reached is named at once.
  absl::Status Connect();
  void Push(const CallOptions& options, const PushRequest& head, std::vector<ConstBytes> grads,
            PushResponse* resp, DoneFn done) override {
    auto call = std::make_unique<Call>();
    call->method = WireMethod::kPush;
    call->options = options;
    head.SerializeToString(&call->head);
    call->grads = std::move(grads);
    call->push_resp = resp;
    call->done = std::move(done);
    Submit(std::move(call));
  }
  void Pull(const CallOptions& options, const PullRequest& req, std::vector<MutableBytes> dest,
            PullResponse* resp, DoneFn done) override {
    auto call = std::make_unique<Call>();
    call->method = WireMethod::kPull;
    call->options = options;
    req.SerializeToString(&call->head);
    call->dest = std::move(dest);
    call->pull_resp = resp;
    call->done = std::move(done);
    Submit(std::move(call));
  }
  const char* name() const override { return "tcp"; }

 private:
  // Checks an answer's tensor bytes against the call and lists where they go.
  using SizesFn = std::function<absl::Status(uint64_t tensor_bytes, std::vector<iovec>* into)>;
  struct Conn {
    TcpSocket socket;
  };
  absl::Status Error(const char* what, const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat(what, " at ", address_, " (TCP): ", s.message()));
  }
  void Submit(std::unique_ptr<Call> call);
  void Loop(Conn* conn);
  absl::Status Open(Conn* conn, absl::Time deadline);
  absl::Status Run(Conn* conn, Call* call);
  // Sends one request (frame, header with the token, head, then `data`) and reads the answer's
  // status, head (into `head`) and tensor bytes (into `dest`, whose sizes `sizes` checks first).
  absl::Status RoundTrip(Conn* conn, WireMethod method, const std::string& body,
                         const std::vector<ConstBytes>& data, const TcpWait& wait,
                         std::string* head, const SizesFn& sizes);
  // RoundTrip's exchange; `broken` says whether the connection may be used again after an error.
  absl::Status Exchange(Conn* conn, WireMethod method, const std::string& body,
                        const std::vector<ConstBytes>& data, const TcpWait& wait, std::string* head,
                        const SizesFn& sizes, bool* broken);

  const std::string address_, host_;
  const int port_;
  const std::string token_;
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Call>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Conn>> conns_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

TcpChannel::~TcpChannel() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (auto& c : conns_) c->socket.Shutdown();  // ends a call in flight (Unavailable)
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
  std::deque<std::unique_ptr<Call>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(queue_);
  }
  for (auto& call : left) {
    call->done(Error(call->what(), absl::CancelledError("the channel was closed")));
  }
}

absl::Status TcpChannel::Connect() {
  auto conn = std::make_unique<Conn>();
  if (absl::Status s = Open(conn.get(), absl::Now() + kConnectTimeout); !s.ok()) {
    return Error("Connect", s);
  }
  absl::MutexLock lock(&mu_);
  Conn* raw = conn.get();
  conns_.push_back(std::move(conn));
  ++idle_;
  threads_.emplace_back([this, raw] { Loop(raw); });
  return absl::OkStatus();
}

void TcpChannel::Submit(std::unique_ptr<Call> call) {
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      queue_.push_back(std::move(call));
      if (idle_ < static_cast<int>(queue_.size()) &&
          static_cast<int>(conns_.size()) < kMaxConnections) {
        conns_.push_back(std::make_unique<Conn>());
        Conn* raw = conns_.back().get();
        ++idle_;
        threads_.emplace_back([this, raw] { Loop(raw); });
      }
      return;
    }
  }
  call->done(Error(call->what(), absl::CancelledError("the channel was closed")));
}

void TcpChannel::Loop(Conn* conn) {
  while (true) {
    std::unique_ptr<Call> call;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TcpChannel* c)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->stop_ || !c->queue_.empty(); },
          this));
      if (stop_) return;
      call = std::move(queue_.front());
      queue_.pop_front();
      --idle_;
    }
    absl::Status s = Run(conn, call.get());
    if (!s.ok()) s = Error(call->what(), s);
    DoneFn done = std::move(call->done);
    call.reset();
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
    }
    done(std::move(s));
  }
}

absl::Status TcpChannel::Open(Conn* conn, absl::Time deadline) {
  absl::StatusOr<TcpSocket> s = TcpSocket::Connect(host_, port_, deadline);
  if (!s.ok()) return s.status();
  {
    absl::MutexLock lock(&mu_);
    conn->socket = *std::move(s);
  }
  std::string ignored;
  absl::Status hello =
      RoundTrip(conn, WireMethod::kHello, kTcpHello, {}, {.deadline = deadline}, &ignored,
                [](uint64_t n, std::vector<iovec>*) {
                  return n == 0 ? absl::OkStatus()
                                : absl::InternalError("the PS answered a hello with tensor bytes");
                });
  if (!hello.ok()) {
    absl::MutexLock lock(&mu_);
    conn->socket.Close();
  }
  return hello;
}

absl::Status TcpChannel::Run(Conn* conn, Call* call) {
  const TcpWait wait{.deadline = call->options.deadline, .canceller = call->options.canceller};
  // A call that waited for a connection past its deadline, or was cancelled meanwhile, is not
  // sent: the PS must not apply what the caller was told failed.
  auto expired = [&]() -> absl::Status {
    if (wait.canceller != nullptr && wait.canceller->cancelled()) {
      return absl::CancelledError("cancelled before it was sent");
    }
    if (absl::Now() >= wait.deadline) {
      return absl::DeadlineExceededError("the deadline passed before it was sent");
    }
    return absl::OkStatus();
  };
  if (absl::Status s = expired(); !s.ok()) return s;
  if (!conn->socket.valid()) {
    absl::Status s = Open(conn, std::min(wait.deadline, absl::Now() + kConnectTimeout));
    if (absl::IsDeadlineExceeded(s) && absl::Now() < wait.deadline) {
      // The PS did not answer within the connect timeout, not the call's: unreachable.
      s = absl::UnavailableError(s.message());
    }
    if (!s.ok()) return s;
    if (s = expired(); !s.ok()) return s;
  }
  std::string head;
  if (call->method == WireMethod::kPush) {
    absl::Status s =
        RoundTrip(conn, WireMethod::kPush, call->head, call->grads, wait, &head,
                  [](uint64_t n, std::vector<iovec>*) {
                    return n == 0 ? absl::OkStatus()
                                  : absl::InternalError("the PS answered a push with tensor bytes");
                  });
    if (s.ok() && !call->push_resp->ParseFromString(head)) {
      return absl::InternalError("a PushResponse that does not parse");
    }
    return s;
  }
  PullResponse* resp = call->pull_resp;
  return RoundTrip(
      conn, WireMethod::kPull, call->head, {}, wait, &head,
      [&](uint64_t tensor_bytes, std::vector<iovec>* into) -> absl::Status {
        if (!resp->ParseFromString(head)) {
          return absl::InternalError("a PullResponse that does not parse");
        }
        if (resp->values_size() != static_cast<int>(call->dest.size())) {
          return absl::InternalError(absl::StrCat("the PS answered ", resp->values_size(),
                                                  " values for ", call->dest.size(), " names"));
        }
        uint64_t total = 0;
        for (int i = 0; i < resp->values_size(); ++i) {
          const auto& v = resp->values(i);
          absl::StatusOr<int64_t> n = TensorBytes(v.value(), v.name());
          if (!n.ok()) return n.status();
          if (*n != call->dest[i].size) {
            return absl::InvalidArgumentError(absl::StrCat("variable \"", v.name(), "\" has ", *n,
                                                           " bytes; the destination holds ",
                                                           call->dest[i].size));
          }
          total += *n;
          into->push_back({call->dest[i].data, static_cast<size_t>(*n)});
        }
        if (total != tensor_bytes) {
          return absl::InternalError(
              absl::StrCat("the PS sent ", tensor_bytes, " tensor bytes for values of ", total));
        }
        return absl::OkStatus();
      });
}

absl::Status TcpChannel::RoundTrip(Conn* conn, WireMethod method, const std::string& body,
                                   const std::vector<ConstBytes>& data, const TcpWait& wait,
                                   std::string* head, const SizesFn& sizes) {
  bool broken = true;
  absl::Status s = Exchange(conn, method, body, data, wait, head, sizes, &broken);
  if (!s.ok() && broken) {  // its state is unknown: the next call connects again
    absl::MutexLock lock(&mu_);
    conn->socket.Close();
  }
  return s;
}

absl::Status TcpChannel::Exchange(Conn* conn, WireMethod method, const std::string& body,
                                  const std::vector<ConstBytes>& data, const TcpWait& wait,
                                  std::string* head, const SizesFn& sizes, bool* broken) {
  WireRequest wire;
  wire.method = static_cast<uint32_t>(method);
  {
    absl::MutexLock lock(&mu_);
    // A channel being destroyed sends nothing more (its destructor waits for this thread).
    if (stop_) return absl::CancelledError("the channel was closed");
    wire.id = next_id_++;
  }
  wire.token_bytes = static_cast<uint32_t>(token_.size());
  wire.head_bytes = static_cast<uint32_t>(body.size());
  TcpFrame frame;
  frame.header_bytes = static_cast<uint32_t>(sizeof(wire) + token_.size());
  frame.data_bytes = body.size();
  for (const ConstBytes& g : data) frame.data_bytes += static_cast<uint64_t>(g.size);
  std::vector<iovec> out = {{&frame, sizeof(frame)},
                            {&wire, sizeof(wire)},
                            {const_cast<char*>(token_.data()), token_.size()},
                            {const_cast<char*>(body.data()), body.size()}};
  for (const ConstBytes& g : data) {
    out.push_back({const_cast<void*>(g.data), static_cast<size_t>(g.size)});
  }
  if (absl::Status s = conn->socket.WriteAll(std::move(out), wait); !s.ok()) return s;
  WireResponse in;
  if (absl::Status s = conn->socket.ReadFull(&in, sizeof(in), wait); !s.ok()) return s;
  if (in.magic != kWireMagic || in.id != wire.id || in.message_bytes > kMaxWireHeadBytes ||
      in.head_bytes > kMaxWireHeadBytes || in.tensor_bytes > kMaxWireRequestBytes) {
    return absl::InternalError("an answer that is not this call's (a malformed header)");
  }
  std::string message(in.message_bytes, '\0');
  head->assign(in.head_bytes, '\0');
  if (absl::Status s = conn->socket.ReadFull(
          {{message.data(), message.size()}, {head->data(), head->size()}}, wait);
      !s.ok()) {
    return s;
  }
  if (in.code != 0) {
    // The PS's refusal: it may close the connection after it (a frame it could not read), so
    // the next call connects again rather than find out.
    *broken = true;
    return absl::Status(static_cast<absl::StatusCode>(in.code), message);
  }
  std::vector<iovec> into;
  if (absl::Status s = sizes(in.tensor_bytes, &into); !s.ok()) return s;
  if (absl::Status s = conn->socket.ReadFull(std::move(into), wait); !s.ok()) return s;
  *broken = false;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataChannel>> MakeTcpDataChannel(const std::string& address) {
  auto stub = ParameterServerService::NewStub(MakeChannel(address));
  DataPlaneRequest req;
  DataPlaneResponse resp;
  absl::Status s = FromGrpcStatus(
      stub->DataPlane(ContextWithTimeout(kConnectTimeout, /*wait_for_ready=*/true).get(), req,
                      &resp),
      "DataPlane", address);
  if (!s.ok()) return s;
  if (resp.tcp_port() <= 0 || resp.tcp_port() > 65535) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the PS at ", address, " serves no TCP data plane (it runs with another --transport)"));
  }
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto channel = std::make_unique<TcpChannel>(address, host, resp.tcp_port());
  if (absl::Status c = channel->Connect(); !c.ok()) return c;
  return channel;
}

}  // namespace pstrain
