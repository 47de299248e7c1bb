// One variable in a ParameterServer of the test's process, served over gRPC on 127.0.0.1 and
// reached through the zero-copy gRPC DataChannel; and the requests of a push and a pull of it
// from worker 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/rpc.h"
#include "gtest/gtest.h"
#include "ps/ps.h"
#include "ps_testing.h"
#include "transport/grpc_data_channel.h"

namespace pstrain::ps_testing {

struct ServedVariable {  // destroyed channel first, PS last
  std::unique_ptr<ParameterServer> ps;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<DataChannel> channel;
};

// `name` holding `initial`, updated by SGD at `learning_rate`.
inline ServedVariable ServeVariable(const std::string& name, const Tensor& initial,
                                    double learning_rate) {
  ServedVariable s;
  s.ps = MakePs();
  CreateVariablesRequest create = CreateReq(name, initial);
  create.mutable_variables(0)->mutable_optimizer()->set_learning_rate(learning_rate);
  CreateVariablesResponse created;
  EXPECT_TRUE(s.ps->CreateVariables(create, &created).ok());
  s.service = MakeParameterServerService(s.ps.get(), nullptr);
  int port = 0;
  s.server = *StartGrpcServer("127.0.0.1:0", {s.service.get()}, &port);
  s.channel = MakeGrpcDataChannel("127.0.0.1:" + std::to_string(port));
  return s;
}

// The head of a push of a float32 gradient of `shape` for `name` (its bytes travel beside it).
inline PushRequest PushHead(const std::string& name, const std::vector<int64_t>& shape) {
  PushRequest head;
  *head.mutable_sender() = Worker(0);
  Gradient* g = head.add_gradients();
  g->set_name(name);
  g->mutable_gradient()->set_dtype(DT_FLOAT);
  for (int64_t d : shape) g->mutable_gradient()->add_shape(d);
  return head;
}

inline PullRequest PullOf(const std::string& name) {
  PullRequest req;
  *req.mutable_sender() = Worker(0);
  req.add_names(name);
  return req;
}

}  // namespace pstrain::ps_testing
