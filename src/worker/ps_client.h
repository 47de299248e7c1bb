// Internal to src/worker: fan-out pull and push over every PS task.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "ps.grpc.pb.h"

namespace pstrain {

// One request per PS per call, all in flight at once. Not thread-safe: one per trainer.
class PsClient {
 public:
  struct Variable {
    std::string name;
    std::vector<int64_t> shape;
    int ps_task = 0;
  };
  // `variables` fixes the order used by Pull and Push.
  PsClient(const std::vector<std::string>& ps_addresses, std::vector<Variable> variables,
           Sender sender, absl::Duration timeout);

  // Pulls every variable. On success (*values)[i] points at variable i's floats, valid until the
  // next Pull; the versions read are remembered for the next Push.
  absl::Status Pull(std::vector<const float*>* values);
  // Pushes grads[i] for variable i, each tagged with the version its Pull returned.
  absl::Status Push(const std::vector<Tensor>& grads);

 private:
  // Runs one call per PS with a request built by `fill` and waits for all; the first error wins.
  template <typename Req, typename Resp, typename Call>
  absl::Status FanOut(const char* what, std::vector<Req>& reqs, std::vector<Resp>& resps,
                      Call call);

  const std::vector<std::string> addresses_;
  const std::vector<Variable> variables_;
  const Sender sender_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs_;
  std::vector<std::vector<size_t>> by_ps_;  // variable indices held by each PS, in request order
  std::vector<PullRequest> pull_reqs_;
  std::vector<PullResponse> pull_resps_;
  std::vector<PushRequest> push_reqs_;
  std::vector<PushResponse> push_resps_;
  std::vector<uint64_t> versions_;
};

}  // namespace pstrain
