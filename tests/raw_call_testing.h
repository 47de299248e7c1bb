// A unary call of raw bytes to a method of a pstrain service through gRPC's generic stub: what
// a foreign client that sends garbage does.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace pstrain::ps_testing {

// The status of a call of `method` (e.g. "/pstrain.ParameterServerService/Push") carrying
// `bytes` as its request, with a deadline of 30 s.
inline grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& method, const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

}  // namespace pstrain::ps_testing
