// A parameter server task in the caller's process, serving gRPC on a free port of 127.0.0.1 and
// configured as the chief would configure it; the tests and the benchmarks share it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "grpcpp/grpcpp.h"
#include "ps/ps.h"

namespace pstrain::ps_testing {

// `workers` workers in `mode`, `replicas` of them aggregated per step (sync).
inline ConsistencyConfig Consistency(const std::string& mode, int workers, int replicas) {
  ConsistencyConfig c;
  c.set_mode(mode);
  c.set_num_workers(workers);
  c.set_replicas_to_aggregate(replicas);
  return c;
}

// The PS as the pstrain command assembles it (PsServer), its gRPC server on 127.0.0.1.
struct LocalPs {
  // `transport` as PsServerOptions::transport ("ucx": status names UCX's reason if it cannot
  // start).
  explicit LocalPs(const ConsistencyConfig& consistency = Consistency("async", 1, 1), int task = 0,
                   const std::string& transport = "grpc") {
    absl::StatusOr<std::unique_ptr<PsServer>> created =
        PsServer::Create({.task = task,
                          .name = absl::StrCat("ps:", task),
                          .transport = transport,
                          .listen_host = "127.0.0.1",
                          .on_shutdown = nullptr});
    status = created.status();
    if (!status.ok()) return;
    ps_server = *std::move(created);
    ps = ps_server->ps();
    ConfigureRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    *req.mutable_consistency() = consistency;
    req.set_wait_timeout_s(30);  // a sync pull that nothing answers fails in 30 s
    ConfigureResponse resp;
    status = ps->Configure(req, &resp);
    int port = 0;
    absl::StatusOr<std::unique_ptr<grpc::Server>> started =
        StartGrpcServer("127.0.0.1:0", ps_server->services(), &port);
    if (started.ok()) server = *std::move(started);
    if (status.ok()) status = started.status();
    address = absl::StrCat("127.0.0.1:", port);
  }
  ~LocalPs() { StopServing(); }
  // Stops the PS and its server (calls in flight get a second to finish).
  void StopServing() {
    if (ps_server != nullptr) ps_server->Stop();
    if (server == nullptr) return;
    server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server.reset();
  }

  absl::Status status;  // what creating, configuring and starting it gave
  std::unique_ptr<PsServer> ps_server;
  ParameterServer* ps = nullptr;  // ps_server's
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

}  // namespace pstrain::ps_testing
