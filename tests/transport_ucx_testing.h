// Helpers for the UCX transport's tests: a real ParameterServer serving gRPC (for DataPlane) on
// 127.0.0.1 and UCX in this process, and pushes and pulls of float vectors through a DataChannel.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/rpc.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "local_ps_testing.h"
#include "ps/ps.h"
#include "ps_testing.h"
#include "transport/ucx.h"

namespace pstrain::ucx_testing {

inline const Sender& Chief() {
  static const Sender* s = new Sender(MakeSender("chief", 0));
  return *s;
}

// One PS task as the pstrain command assembles it: gRPC (for DataPlane) on 127.0.0.1 and the
// server of `transport` ("ucx", "tcp"; none for "grpc").
struct LocalPs : ps_testing::LocalPs {
  explicit LocalPs(const std::string& transport = "ucx", const std::string& mode = "async")
      : ps_testing::LocalPs(ps_testing::Consistency(mode, 1, 1), 0, transport) {
    if (status.ok()) served = ps->DataPlane();
  }
  // Creates `name` with `init` and SGD at `lr`.
  void Create(const std::string& name, const Tensor& init, double lr) {
    CreateVariablesRequest req;
    *req.mutable_sender() = Chief();
    VariableDef* def = req.add_variables();
    def->set_name(name);
    EncodeTensor(init, def->mutable_initial_value());
    def->mutable_optimizer()->set_name("sgd");
    def->mutable_optimizer()->set_learning_rate(lr);
    CreateVariablesResponse resp;
    absl::Status s = ps->CreateVariables(req, &resp);
    ASSERT_TRUE(s.ok()) << s;
  }
  // The variable's value read from the PS directly.
  std::vector<float> Value(const std::string& name) {
    return ps_testing::PullAsChief(ps, name, Chief()).values;
  }

  // What the PS announced at the start (its UCX server's address with `ucx`).
  DataPlaneResponse served;
};

inline CallOptions Within(absl::Duration d) { return {.deadline = absl::Now() + d}; }

// Runs a call and waits for its done.
inline absl::Status Wait(const std::function<void(DoneFn)>& call) {
  absl::Notification n;
  absl::Status result;
  call([&](absl::Status s) {
    result = s;
    n.Notify();
  });
  if (!n.WaitForNotificationWithTimeout(absl::Seconds(60))) return absl::InternalError("no done");
  return result;
}

inline absl::Status PushFloats(DataChannel* ch, const std::vector<std::string>& names,
                               const std::vector<const std::vector<float>*>& grads,
                               PushResponse* resp,
                               CallOptions options = Within(absl::Seconds(30))) {
  PushRequest head;
  *head.mutable_sender() = MakeSender("worker", 0);
  std::vector<ConstBytes> bytes;
  for (size_t i = 0; i < names.size(); ++i) {
    Gradient* g = head.add_gradients();
    g->set_name(names[i]);
    g->mutable_gradient()->set_dtype(DT_FLOAT);
    g->mutable_gradient()->add_shape(grads[i]->size());
    bytes.push_back({grads[i]->data(), int64_t(grads[i]->size() * sizeof(float))});
  }
  return Wait([&](DoneFn done) { ch->Push(options, head, bytes, resp, std::move(done)); });
}

inline absl::Status PullFloats(DataChannel* ch, const std::vector<std::string>& names,
                               const std::vector<std::vector<float>*>& dest, PullResponse* resp,
                               CallOptions options = Within(absl::Seconds(30)),
                               uint64_t min_version = 0) {
  PullRequest req;
  *req.mutable_sender() = MakeSender("worker", 0);
  req.set_min_version(min_version);
  std::vector<MutableBytes> bytes;
  for (size_t i = 0; i < names.size(); ++i) {
    req.add_names(names[i]);
    bytes.push_back({dest[i]->data(), int64_t(dest[i]->size() * sizeof(float))});
  }
  return Wait([&](DoneFn done) { ch->Pull(options, req, bytes, resp, std::move(done)); });
}

// A PS (LocalPs in `mode` over `transport`, holding `variables` of zeros with SGD) in a child
// process, serving until Stop or the child is killed. Fork it before this process starts gRPC or
// UCX.
class ForkedPs {
 public:
  ForkedPs(const std::string& mode, const std::vector<std::pair<std::string, int64_t>>& variables,
           const std::string& transport = "ucx") {
    int to_parent[2], to_child[2];
    if (pipe(to_parent) != 0 || pipe(to_child) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(to_child[1]);
      LocalPs ps(transport, mode);
      for (const auto& [name, floats] : variables) {
        ps.Create(name, Tensor(std::vector<int64_t>{floats}, 0.0f), 1.0);
      }
      const int port = ps.status.ok() ? std::stoi(ps.address.substr(ps.address.rfind(':') + 1)) : 0;
      if (write(to_parent[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
      char c;
      while (read(to_child[0], &c, 1) > 0) {
      }
      _exit(0);
    }
    close(to_child[0]);
    close(to_parent[1]);
    stop_ = to_child[1];
    int port = 0;
    if (read(to_parent[0], &port, sizeof(port)) == sizeof(port) && port != 0) {
      address_ = absl::StrCat("127.0.0.1:", port);
    }
    close(to_parent[0]);
  }
  ~ForkedPs() { Stop(); }
  // host:port of its gRPC server; empty if it did not start.
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Ends the child; true if it exited cleanly.
  bool Stop() {
    if (pid_ <= 0) return false;
    close(stop_);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

 private:
  pid_t pid_ = -1;
  int stop_ = -1;
  std::string address_;
};

}  // namespace pstrain::ucx_testing
