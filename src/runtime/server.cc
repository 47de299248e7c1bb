// RunServer: one process of the cluster, in the role its task names.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/rpc.h"
#include "master.grpc.pb.h"
#include "ps/ps.h"
#include "runtime/http_listener.h"
#include "runtime/log_format.h"
#include "runtime/runtime.h"
#include "runtime/signals.h"
#include "runtime/status_page.h"
#include "runtime/task_metrics.h"
#include "spdlog/spdlog.h"
#include "worker/worker.h"

namespace pstrain {
namespace {

// The task's own host when it is a loopback one, else empty. A task listens there when it is
// local, else on every interface, as TensorFlow's server does.
std::string LoopbackHost(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  if (host == "localhost" || host.rfind("127.", 0) == 0 || host == "[::1]") return host;
  return "";
}

std::string ListenAddress(const std::string& address) {
  const std::string host = LoopbackHost(address);
  return (host.empty() ? "0.0.0.0" : host) + address.substr(address.rfind(':'));
}

// Registers with the chief, waiting for it within the connect timeout. A refusal (a task index
// already taken by another process, a role the chief does not accept) is final.
absl::StatusOr<RegisterResponse> RegisterWithChief(const ServerOptions& o,
                                                   MasterService::Stub* stub,
                                                   const RegisterRequest& req) {
  const std::string chief = o.cluster.Tasks("chief")[0];
  RegisterResponse resp;
  const absl::Duration timeout = absl::Seconds(o.connect_timeout_s);
  const absl::Time end = absl::Now() + timeout;
  absl::Status s = RetryUntil(timeout, "the chief at " + chief, [&] {
    const absl::Duration attempt = std::min(absl::Seconds(5), end - absl::Now());
    return FromGrpcStatus(
        stub->Register(ContextWithTimeout(attempt, /*wait_for_ready=*/true).get(), req, &resp),
        "Register", "chief " + chief);
  });
  if (!s.ok()) return s;
  return resp;
}

// Keeps the task known to the chief it obeys, and to a chief restarted in its place: Register is
// sent again every second (a harmless retry for a chief that knows this incarnation). An answer
// from another chief incarnation is handed to `on_registered`, so the task obeys the new chief.
// The chief's absence is not an error here: Serve notices a chief lost for too long.
class ChiefWatch {
 public:
  ChiefWatch(MasterService::Stub* stub, RegisterRequest req,
             std::function<void(const RegisterResponse&)> on_registered)
      : stub_(stub), req_(std::move(req)), on_registered_(std::move(on_registered)) {}

  // The first registration's answer.
  void Registered(const RegisterResponse& r) {
    obeyed_ = r.chief_incarnation();
    on_registered_(r);
  }

  // One more Register; true if the chief answered, even with a refusal (one for an incarnation
  // it declared dead, say, which the task learns from its own calls).
  bool Refresh() {
    RegisterResponse resp;
    const grpc::Status s =
        stub_->Register(ContextWithTimeout(kAttempt, /*wait_for_ready=*/true).get(), req_, &resp);
    if (!s.ok()) {
      return s.error_code() != grpc::StatusCode::UNAVAILABLE &&
             s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
    }
    if (resp.chief_incarnation() != obeyed_) {
      spdlog::info("{} registered with a new chief (incarnation {}, was {})",
                   TaskName(req_.sender().job(), req_.sender().task()), resp.chief_incarnation(),
                   obeyed_);
      Registered(resp);
    }
    return true;
  }

 private:
  static constexpr absl::Duration kAttempt = absl::Milliseconds(500);
  MasterService::Stub* stub_;
  const RegisterRequest req_;
  const std::function<void(const RegisterResponse&)> on_registered_;
  uint64_t obeyed_ = 0;  // the chief incarnation of the last answer handed on
};

// How the job ended for this task, as the chief's Shutdown (or the loss of the chief) said.
struct JobEnd {
  absl::Notification notified;
  std::string reason;
  bool succeeded = false;

  void Set(const std::string& why, bool ok) {
    if (notified.HasBeenNotified()) return;
    reason = why;
    succeeded = ok;
    notified.Notify();
  }
  // OK only if the chief said the job succeeded.
  absl::Status Outcome() const {
    if (succeeded) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat("the job did not succeed: ", reason));
  }
};

// Serves `services` until the job ends; registers with the chief first and hands its response
// to `on_registered`. `before_stop` ends calls that would otherwise keep the server from
// stopping. Returns the job's outcome for this task.
absl::Status Serve(
    const ServerOptions& o, const std::string& address, const std::vector<grpc::Service*>& services,
    JobEnd* end, const std::function<void(const RegisterResponse&)>& on_registered,
    const std::function<void()>& before_stop = [] {}) {
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartGrpcServer(ListenAddress(address), services);
  if (!server.ok()) return server.status();
  spdlog::info("{} serving on {}", TaskName(o.job, o.task), address);
  const std::string chief = o.cluster.Tasks("chief")[0];
  std::shared_ptr<grpc::Channel> channel = MakeChannel(chief);
  auto stub = MasterService::NewStub(channel);
  RegisterRequest req;
  *req.mutable_sender() = MakeSender(o.job, o.task);
  req.set_address(address);
  ChiefWatch watch(stub.get(), req, on_registered);
  absl::StatusOr<RegisterResponse> registered = RegisterWithChief(o, stub.get(), req);
  absl::Status s = registered.status();
  if (s.ok()) watch.Registered(*registered);
  // Until the chief ends the job, register again every second (sooner while it is away). A chief
  // gone for longer than the connect timeout has ended the job without saying so, and this task
  // must not run on forever; one restarted in its place (by launch or another supervisor) is back
  // well within it.
  const absl::Duration grace = absl::Seconds(o.connect_timeout_s);
  absl::Time last_seen = absl::Now();
  bool answered = true;
  while (s.ok() && !end->notified.WaitForNotificationWithTimeout(
                       answered ? absl::Seconds(1) : absl::Milliseconds(100))) {
    // While the chief does not answer, ask more often: a restarted chief learns of this task,
    // and this task of it, as soon as it listens.
    answered = watch.Refresh();
    if (answered) {
      last_seen = absl::Now();
    } else if (absl::Now() - last_seen > grace) {
      s = absl::UnavailableError(absl::StrCat("lost the chief at ", chief, " for ",
                                              absl::FormatDuration(grace), ": stopping"));
    }
  }
  before_stop();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return s.ok() ? end->Outcome() : s;
}

// Logs the chief's Shutdown and records it. `end` is shared: a worker (kept for its metrics) may
// still report the loss of its chief after its run returned.
ShutdownFn RecordShutdown(const ServerOptions& o, std::shared_ptr<JobEnd> end) {
  return [&o, end](const std::string& reason, bool succeeded) {
    spdlog::info("{} shutting down ({}): {}", TaskName(o.job, o.task),
                 succeeded ? "job succeeded" : "job failed", reason);
    end->Set(reason, succeeded);
  };
}

// The task's HTTP listener, if it has one, and what its pages read: the chief's monitor, the
// PS or the worker. They outlive the role's run, so that the listener can linger after the job
// (--metrics_linger) with the final counters; the listener is stopped first.
struct TaskHttp {
  JobMonitor monitor;
  std::unique_ptr<PsServer> ps;
  std::unique_ptr<Worker> worker;
  std::unique_ptr<HttpListener> listener;

  // Adds /metrics from `source` (and on the chief the status page) and starts serving.
  void Serve(MetricsSource source) {
    if (listener == nullptr) return;
    ServeMetrics(listener.get(), source);
    if (source.monitor != nullptr) ServeStatusPage(listener.get(), source.monitor);
    listener->Serve();
  }
};

// This process's data plane from --transport (docs/transport_ucx.md): UCX traffic is not covered
// by TLS, so with TLS "ucx" is refused and "auto" means gRPC.
absl::Status SetTransport(const ServerOptions& o) {
  absl::StatusOr<std::string> transport = TransportUnderSecurity(o.transport, "--transport");
  if (!transport.ok()) return transport.status();
  if (*transport != o.transport) {
    spdlog::info("{}: --transport auto with TLS: the data plane stays on gRPC",
                 TaskName(o.job, o.task));
  }
  SetTransportOptions({.transport = *transport});
  return absl::OkStatus();
}

absl::Status RunPs(const ServerOptions& o, const std::string& address, TaskHttp* http) {
  auto end = std::make_shared<JobEnd>();
  absl::StatusOr<std::unique_ptr<PsServer>> created =
      PsServer::Create({.task = o.task,
                        .name = TaskName(o.job, o.task),
                        .transport = GetTransportOptions().transport,
                        // The data plane's port as its gRPC server's: on loopback in a local job.
                        .listen_host = LoopbackHost(address),
                        .on_shutdown = RecordShutdown(o, end)});
  if (!created.ok()) return created.status();
  PsServer* server = (http->ps = *std::move(created)).get();
  http->Serve({.task = TaskName(o.job, o.task), .ps = server->ps()});
  return Serve(
      o, address, server->services(), end.get(),
      [&](const RegisterResponse& r) {
        if (r.chief_incarnation() != 0) server->ps()->ExpectChief(r.chief_incarnation());
      },
      [&] { server->Stop(); });
}

absl::Status RunWorker(const ServerOptions& o, const std::string& address, TaskHttp* http) {
  WorkerOptions wo;
  wo.task = o.task;
  wo.ps_addresses = o.cluster.Tasks("ps");
  wo.chief_address = o.cluster.Tasks("chief")[0];
  auto end = std::make_shared<JobEnd>();
  absl::StatusOr<std::unique_ptr<Worker>> created = Worker::Create(wo, RecordShutdown(o, end));
  if (!created.ok()) return created.status();
  Worker* worker = (http->worker = *std::move(created)).get();
  http->Serve({.task = TaskName(o.job, o.task), .worker = worker});
  return Serve(o, address, {worker->service()}, end.get(), [&](const RegisterResponse& r) {
    if (r.chief_incarnation() != 0) worker->ExpectChief(r.chief_incarnation());
  });
}

absl::Status RunChief(const ServerOptions& o, const std::string& address, TaskHttp* http) {
  MasterOptions mo;
  mo.monitor = &http->monitor;
  mo.address = address;
  mo.print_progress = [task = TaskName(o.job, o.task)](const std::string& line) {
    PrintProgress(task, line);
  };
  http->Serve({.task = TaskName(o.job, o.task), .monitor = &http->monitor});
  mo.listen_address = ListenAddress(address);
  mo.ps_addresses = o.cluster.Tasks("ps");
  mo.worker_addresses = o.cluster.Tasks("worker");
  mo.job = o.job_config;
  mo.job.register_timeout = absl::Seconds(o.connect_timeout_s);
  std::optional<StopOnSignals> stop_on_signals;
  if (o.stop_on_signals) stop_on_signals.emplace();
  absl::StatusOr<JobResult> result = RunJob(mo);
  if (!result.ok()) return result.status();
  std::printf("%s\n", result->ToJson().c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace

int RunServer(const ServerOptions& o) {
  SetLogFormat(o.log_format, TaskName(o.job, o.task));
  absl::StatusOr<std::string> address = o.cluster.Address(o.job, o.task);
  absl::Status s = address.status();
  if (s.ok()) {
    absl::StatusOr<Security> security = LoadSecurity(o.security);
    s = security.status();
    if (s.ok()) SetSecurity(*std::move(security));
  }
  if (s.ok()) s = SetTransport(o);
  TaskHttp http;
  if (s.ok() && o.metrics_port != 0) {
    const std::string listen = ListenAddress(*address);
    absl::StatusOr<std::unique_ptr<HttpListener>> listener = HttpListener::Bind(
        listen.substr(0, listen.rfind(':')), o.metrics_port, GetSecurity()->token);
    s = listener.status();
    if (s.ok()) http.listener = *std::move(listener);
  }
  if (s.ok()) {
    if (o.job == "ps") {
      s = RunPs(o, *address, &http);
    } else if (o.job == "worker") {
      s = RunWorker(o, *address, &http);
    } else if (o.job == "chief") {
      s = RunChief(o, *address, &http);
    } else {
      s = absl::InvalidArgumentError(absl::StrCat("job \"", o.job, "\" cannot run a server here"));
    }
  }
  if (http.listener != nullptr && o.metrics_linger_s > 0) {
    absl::SleepFor(absl::Seconds(o.metrics_linger_s));
  }
  if (!s.ok()) {
    PrintTaskError(TaskName(o.job, o.task), std::string(s.message()));
  }
  return ExitCode(s);
}

}  // namespace pstrain
