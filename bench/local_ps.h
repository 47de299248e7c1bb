// A parameter server in the benchmark's process, serving gRPC on a free port of 127.0.0.1 and
// configured for `num_workers` async workers, as the chief would configure it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/rpc.h"
#include "grpcpp/grpcpp.h"
#include "ps/ps.h"

namespace pstrain::bench {

struct LocalPs {
  explicit LocalPs(int num_workers = 1) {
    ps = *ParameterServer::Create({});
    ConfigureRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    req.mutable_consistency()->set_mode("async");
    req.mutable_consistency()->set_num_workers(num_workers);
    req.mutable_consistency()->set_replicas_to_aggregate(num_workers);
    ConfigureResponse resp;
    status = ps->Configure(req, &resp);
    service = MakeParameterServerService(ps.get(), nullptr);
    int port = 0;
    absl::StatusOr<std::unique_ptr<grpc::Server>> started =
        StartGrpcServer("127.0.0.1:0", {service.get()}, &port);
    if (started.ok()) server = *std::move(started);
    if (status.ok()) status = started.status();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~LocalPs() {
    ps->Stop();
    if (server) server->Shutdown();
  }
  absl::Status status;
  std::unique_ptr<ParameterServer> ps;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

}  // namespace pstrain::bench
