#include "common/rpc.h"

#include <algorithm>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"
#include "grpcpp/support/client_interceptor.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// gRPC's own log lines (a failed bind prints a nested error of 600 characters) go to spdlog at
// debug level, so that users see pstrain's one-line errors. An assertion failure is about to abort
// the process and stays visible, and so does a peer refused by TLS (no certificate, one of another
// CA, an expired one, plaintext to a TLS port): a warning, as for a request without the token.
void LogFromGrpc(gpr_log_func_args* args) {
  const std::string_view message = args->message;
  if (message.rfind("assertion failed", 0) == 0) {
    spdlog::critical("grpc {}:{}: {}", args->file, args->line, message);
  } else if (message.rfind("Handshake failed", 0) == 0) {
    // OpenSSL's reason; gRPC names no peer address in it.
    spdlog::warn("TLS handshake failed: {}", message);
  } else {
    spdlog::debug("grpc {}:{}: {}", args->file, args->line, message);
  }
}

// Likewise protobuf's: a request with invalid UTF-8 in a string is refused with a status, and
// the library's note about it is for debugging.
void LogFromProtobuf(google::protobuf::LogLevel level, const char* file, int line,
                     const std::string& message) {
  if (level >= google::protobuf::LOGLEVEL_FATAL) {
    spdlog::critical("protobuf {}:{}: {}", file, line, message);
  } else {
    spdlog::debug("protobuf {}:{}: {}", file, line, message);
  }
}

void RouteGrpcLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    gpr_set_log_function(LogFromGrpc);
    google::protobuf::SetLogHandler(LogFromProtobuf);
  });
}

// Adds the job token to the initial metadata of every call on a channel.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kTokenMetadataKey, *value_);
    }
    methods->Proceed();
  }

 private:
  const std::string* value_;  // owned by the factory, which outlives the channel's calls
};

class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token) : value_(kTokenPrefix + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new TokenInterceptor(&value_);  // gRPC owns and deletes the interceptor
  }

 private:
  const std::string value_;
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& what,
                            const std::string& address) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, " at ", address, ": ", s.error_message()));
}

// HTTP/2 tuning of the data path (both ends: MakeChannel and StartGrpcServer) stays at gRPC's
// defaults, on measurement (docs/data_plane.md, "The gRPC path"): larger frames
// (GRPC_ARG_HTTP2_MAX_FRAME_SIZE 1 MB or 16 MB), a 16 MB stream window without the BDP probe
// (GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, GRPC_ARG_HTTP2_BDP_PROBE), larger TCP read chunks
// (GRPC_ARG_TCP_*_READ_CHUNK_SIZE) and a 16 MB write buffer (GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE)
// each left the CPU and time of a 1 MB and a 16 MB push + pull within the run-to-run noise,
// and 16 MB frames made some runs twice as slow. The BDP probe already grows the window to what
// 127.0.0.1 needs within the first calls.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  RouteGrpcLogging();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Each channel gets its own TCP connection, so parallel peers do not share one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Peers start in any order: retry a refused connection after 100 ms (gRPC's default is 1 s),
  // growing to at most 1 s. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS stays at gRPC's default of 20 s:
  // gRPC gives each connection attempt max(min backoff, current backoff) to complete, so a
  // small minimum would cut off handshakes with a peer that is slow to answer under load.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  const std::shared_ptr<const Security> security = GetSecurity();
  if (security->token.empty()) {
    return grpc::CreateCustomChannel(address, MakeChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> token;
  token.push_back(std::make_unique<TokenInterceptorFactory>(security->token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, MakeChannelCredentials(),
                                                                 args, std::move(token));
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& address, const std::vector<grpc::Service*>& services, int* bound_port) {
  RouteGrpcLogging();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, MakeServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (port in use or address not local)"));
  }
  if (bound_port != nullptr) *bound_port = port;
  return server;
}

std::unique_ptr<grpc::ClientContext> ContextWithTimeout(absl::Duration timeout,
                                                        bool wait_for_ready) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ctx->set_wait_for_ready(wait_for_ready);
  return ctx;
}

absl::Status RetryUntil(absl::Duration deadline, const std::string& what,
                        const std::function<absl::Status()>& attempt) {
  const absl::Time start = absl::Now();
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::Status s = attempt();
    if (s.ok()) return s;
    const bool retryable = absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
    if (!retryable) return s;
    if (absl::Now() - start + backoff > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("gave up waiting for ", what, " after ",
                                                      absl::FormatDuration(deadline), ": ",
                                                      s.message()));
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(backoff));
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

void CallCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
}

bool CallCanceller::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void CallCanceller::Add(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) ctx->TryCancel();  // the call then ends as soon as it starts
  active_.push_back(ctx);
}

void CallCanceller::Remove(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  active_.erase(std::remove(active_.begin(), active_.end(), ctx), active_.end());
}

Sender MakeSender(const std::string& job, int task) {
  static const uint64_t incarnation = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) | rd() | 1;
  }();
  Sender s;
  s.set_job(job);
  s.set_task(task);
  s.set_incarnation(incarnation);
  return s;
}

std::string TaskName(const std::string& job, int task) { return absl::StrCat(job, ":", task); }

}  // namespace pstrain
