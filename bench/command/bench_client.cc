// The public client's side of `pstrain bench`'s transport section: a helper process that runs a
// user's program as the client library gives it (client/client.h, the API the Python package
// wraps): connect to the chief, create one variable, then Pull + Push steps of it.
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/command/bench_internal.h"
#include "client/client.h"

namespace pstrain::bench {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(120);

struct ClientState {
  ClientSpec spec;
  std::unique_ptr<Client> client;
  std::vector<TensorView> grads;
  std::vector<float> grad;
};

absl::Status Step(ClientState& w, bool push) {
  std::vector<const float*> values;
  absl::Status s = w.client->Pull(&values);
  if (s.ok() && push) s = w.client->Push(w.grads);
  return s;
}

absl::Status Connect(ClientState& w) {
  ClientOptions options;
  options.chief = w.spec.chief;
  options.task = w.spec.index;
  options.timeout = kCallTimeout;
  options.transport = w.spec.transport;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(options);
  if (!c.ok()) return c.status();
  w.client = *std::move(c);
  VariableOptions v;
  v.name = "bench";
  v.shape = {w.spec.floats};
  v.initializer.kind = "constant";
  v.initializer.value = 0.5;
  OptimizerOptions sgd;
  sgd.learning_rate = 1e-6;
  v.optimizer = sgd;
  v.partitioner = absl::StrCat("fixed:", w.spec.num_ps);  // rows split over the PS, as PsWorker
  absl::StatusOr<int> created = w.client->CreateVariable(v);
  if (!created.ok()) return created.status();
  w.grad.assign(w.spec.floats, 1e-3f);
  w.grads = {TensorView{{w.spec.floats}, w.grad.data()}};
  // Connects, and warms the buffers, before anything is timed.
  return Step(w, true);
}

}  // namespace

CommandHandler ClientWorker(ClientSpec spec) {
  auto w = std::make_shared<ClientState>();
  w->spec = std::move(spec);
  return [w](const Command& c) {
    Reply r;
    absl::Status s;
    if (c.op == kConnect) {
      s = Connect(*w);
    } else if ((c.op == kStep || c.op == kLatency) && w->client != nullptr) {
      return TimeSteps(c, [&]() -> absl::Status {
        absl::Status step = Step(*w, c.op == kStep);
        if (step.ok()) return step;
        return absl::Status(step.code(), absl::StrCat("Client: ", step.message()));
      });
    } else {
      s = absl::InvalidArgumentError("bench client: bad command");
    }
    if (!s.ok()) r.error = absl::StrCat("Client: ", s.message());
    return r;
  };
}

}  // namespace pstrain::bench
