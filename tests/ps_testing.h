// Helpers for the parameter server's tests: senders, variables, pushes and pulls in flight.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "ps/ps.h"

namespace pstrain::ps_testing {

inline Sender From(const std::string& job, int task, uint64_t incarnation) {
  Sender s;
  s.set_job(job);
  s.set_task(task);
  s.set_incarnation(incarnation);
  return s;
}
inline Sender Worker(int task, uint64_t incarnation = 1) {
  return From("worker", task, incarnation);
}
inline Sender Chief(uint64_t incarnation = 100) { return From("chief", 0, incarnation); }

inline OptimizerConfig Sgd(double lr = 1.0) {
  OptimizerConfig o;
  o.set_name("sgd");
  o.set_learning_rate(lr);
  return o;
}

inline ConfigureRequest Config(const std::string& mode, int workers, int replicas, int staleness,
                               double wait_s, const std::vector<Sender>& announced) {
  ConfigureRequest req;
  *req.mutable_sender() = Chief();
  req.mutable_consistency()->set_mode(mode);
  req.mutable_consistency()->set_num_workers(workers);
  req.mutable_consistency()->set_replicas_to_aggregate(replicas);
  req.mutable_consistency()->set_staleness(staleness);
  req.set_wait_timeout_s(wait_s);
  for (const Sender& s : announced) *req.add_workers() = s;
  return req;
}

// A PS expecting Chief() and configured with `config` (unconfigured if it has no mode).
inline std::unique_ptr<ParameterServer> MakePs(const ConfigureRequest* config = nullptr) {
  std::unique_ptr<ParameterServer> ps = *ParameterServer::Create({});
  ps->ExpectChief(Chief().incarnation());
  if (config) {
    ConfigureResponse resp;
    absl::Status s = ps->Configure(*config, &resp);
    EXPECT_TRUE(s.ok()) << s;
  }
  return ps;
}

inline CreateVariablesRequest CreateReq(const std::string& name, const Tensor& init) {
  CreateVariablesRequest req;
  *req.mutable_sender() = Chief();
  VariableDef* def = req.add_variables();
  def->set_name(name);
  EncodeTensor(init, def->mutable_initial_value());
  *def->mutable_optimizer() = Sgd();
  return req;
}

inline void Create(ParameterServer* ps, const std::string& name, const Tensor& init) {
  CreateVariablesResponse resp;
  absl::Status s = ps->CreateVariables(CreateReq(name, init), &resp);
  ASSERT_TRUE(s.ok()) << s;
}

inline PushRequest PushReq(const Sender& from, const std::string& name, const Tensor& grad,
                           uint64_t read_version) {
  PushRequest req;
  *req.mutable_sender() = from;
  Gradient* g = req.add_gradients();
  g->set_name(name);
  g->set_read_version(read_version);
  EncodeTensor(grad, g->mutable_gradient());
  return req;
}

inline absl::Status Push(ParameterServer* ps, const Sender& from, const std::string& name,
                         float value, uint64_t read_version) {
  PushResponse resp;
  return ps->Push(PushReq(from, name, Tensor({4}, value), read_version), &resp);
}

inline absl::Status Leave(ParameterServer* ps, const Sender& from, bool pause) {
  LeaveRequest req;
  *req.mutable_sender() = from;
  req.set_pause(pause);
  LeaveResponse resp;
  return ps->Leave(req, &resp);
}

// A pull of one variable in flight.
struct AsyncPull {
  PullRequest req;
  PullResponse resp;
  absl::Status status;
  std::atomic<bool> finished{false};
  AsyncPull(ParameterServer* ps, const Sender& from, const std::string& name, uint64_t min_version,
            int64_t clock) {
    *req.mutable_sender() = from;
    req.add_names(name);
    req.set_min_version(min_version);
    req.set_clock(clock);
    ps->PullAsync(req, &resp, [this](absl::Status s) {
      status = std::move(s);
      finished = true;
    });
  }
  bool done() const { return finished.load(); }
  float first() const {
    return reinterpret_cast<const float*>(resp.values(0).value().data().data())[0];
  }
};

inline bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 3000 && !cond(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// A variable's values and version, pulled from `ps` as `chief`. A failed pull fails the test and
// reads as empty.
struct Pulled {
  std::vector<float> values;
  uint64_t version = 0;
  bool operator==(const Pulled&) const = default;
};
inline Pulled PullAsChief(ParameterServer* ps, const std::string& name,
                          const Sender& chief = Chief()) {
  PullRequest req;
  *req.mutable_sender() = chief;
  req.add_names(name);
  PullResponse resp;
  absl::Status s = ps->Pull(req, &resp);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  absl::StatusOr<Tensor> t = DecodeTensor(resp.values(0).value());
  EXPECT_TRUE(t.ok()) << t.status();
  return {t.ok() ? t->values : std::vector<float>{}, resp.values(0).version()};
}

// Version and first element of a variable, pulled as the chief.
struct State {
  uint64_t version = 0;
  float first = 0;
  bool operator==(const State&) const = default;
};
inline State Read(ParameterServer* ps, const std::string& name) {
  const Pulled p = PullAsChief(ps, name);
  return {p.version, p.values.empty() ? 0.0f : p.values[0]};
}

inline StatsResponse Stats(ParameterServer* ps) {
  StatsRequest req;
  *req.mutable_sender() = Chief();
  StatsResponse resp;
  EXPECT_TRUE(ps->Stats(req, &resp).ok());
  return resp;
}

}  // namespace pstrain::ps_testing
