// The worker side of `pstrain bench`'s transport section: a helper process that sets the PS
// tasks up as the chief would and drives PsClient Pull + Push, as a training worker does.
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/command/bench_internal.h"
#include "client/ps_client.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"
#include "transport/transport.h"

namespace pstrain::bench {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(120);

std::string VariableName(size_t size_index) { return absl::StrCat("bench", size_index); }

// Variable i's shards: rows split evenly over the PS tasks.
VariableRef Variable(const WorkerSpec& spec, size_t i) {
  const int64_t n = spec.floats[i];
  const int num_ps = static_cast<int>(spec.ps.size());
  VariableRef v{VariableName(i), {n}, {}};
  for (int p = 0; p < num_ps; ++p) {
    const std::string shard = num_ps == 1 ? v.name : absl::StrCat(v.name, "/part", p);
    v.shards.push_back({shard, p, n * p / num_ps, n * (p + 1) / num_ps});
  }
  return v;
}

absl::Status SetUpPs(const WorkerSpec& spec) {
  for (size_t p = 0; p < spec.ps.size(); ++p) {
    auto stub = ParameterServerService::NewStub(MakeChannel(spec.ps[p]));
    ConfigureRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    req.mutable_consistency()->set_mode("async");
    req.mutable_consistency()->set_num_workers(spec.num_workers);
    req.mutable_consistency()->set_replicas_to_aggregate(spec.num_workers);
    ConfigureResponse resp;
    absl::Status s = FromGrpcStatus(
        stub->Configure(ContextWithTimeout(absl::Seconds(60), true).get(), req, &resp), "Configure",
        spec.ps[p]);
    if (!s.ok()) return s;
    // One request per variable, so that no message carries all of them.
    for (size_t i = 0; i < spec.floats.size(); ++i) {
      const ShardRef shard = Variable(spec, i).shards[p];
      const int64_t rows = shard.row_end - shard.row_begin;
      CreateVariablesRequest create;
      *create.mutable_sender() = MakeSender("chief", 0);
      VariableDef* def = create.add_variables();
      def->set_name(shard.name);
      const std::vector<float> init(rows, 0.5f);
      EncodeTensor(std::vector<int64_t>{rows}, init.data(), def->mutable_initial_value());
      def->mutable_optimizer()->set_name("sgd");
      def->mutable_optimizer()->set_learning_rate(1e-6);
      CreateVariablesResponse created;
      s = FromGrpcStatus(
          stub->CreateVariables(ContextWithTimeout(kCallTimeout).get(), create, &created),
          "CreateVariables", spec.ps[p]);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

struct WorkerState {
  WorkerSpec spec;
  std::vector<std::unique_ptr<PsClient>> clients;  // one per size
  std::vector<std::vector<Tensor>> grads;
};

absl::Status Step(WorkerState& w, size_t i, bool push) {
  std::vector<const float*> values;
  absl::Status s = w.clients[i]->Pull(&values);
  if (s.ok() && push) s = w.clients[i]->Push(w.grads[i]);
  return s;
}

absl::Status Connect(WorkerState& w) {
  SetTransportOptions({.transport = w.spec.transport});
  if (w.spec.transport != "grpc") {
    // Until PsClient routes its bulk calls through the transport, only a channel made directly
    // tells whether this transport can start at all.
    for (const std::string& address : w.spec.ps) {
      absl::StatusOr<std::unique_ptr<DataChannel>> channel =
          MakeDataChannel(w.spec.transport, address);
      if (!channel.ok()) return channel.status();
    }
  }
  for (size_t i = 0; i < w.spec.floats.size(); ++i) {
    w.clients.push_back(
        std::make_unique<PsClient>(w.spec.ps, std::vector<VariableRef>{Variable(w.spec, i)},
                                   MakeSender("worker", w.spec.index), kCallTimeout));
    Tensor g(std::vector<int64_t>{w.spec.floats[i]});
    g.values.assign(w.spec.floats[i], 1e-3f);
    w.grads.push_back({std::move(g)});
    // Connects, and warms the buffers, before anything is timed.
    if (absl::Status s = Step(w, i, true); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

CommandHandler PsWorker(WorkerSpec spec) {
  auto w = std::make_shared<WorkerState>();
  w->spec = std::move(spec);
  return [w](const Command& c) {
    Reply r;
    absl::Status s;
    if (c.op == kSetup) {
      s = SetUpPs(w->spec);
    } else if (c.op == kConnect) {
      s = Connect(*w);
    } else if ((c.op == kStep || c.op == kLatency) && c.size_index >= 0 &&
               c.size_index < static_cast<int>(w->clients.size())) {
      return TimeSteps(c, [&] { return Step(*w, c.size_index, c.op == kStep); });
    } else {
      s = absl::InvalidArgumentError("bench worker: bad command");
    }
    if (!s.ok()) r.error = std::string(s.message());
    return r;
  };
}

}  // namespace pstrain::bench
