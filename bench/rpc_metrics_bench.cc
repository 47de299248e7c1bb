// The cost of the per-method RPC metrics (common/rpc_metrics.h) on the latency-sensitive path:
//
//   BM_Pull4K/metrics:0|1   one Pull of a 4 KB variable (1024 floats) from a PS on 127.0.0.1
//                           over gRPC, with ObserveServedRpc off and on
//   BM_Observe              ObserveServedRpc alone, on a method already seen
//
// Run with repetitions and random interleaving, so that the two Pull variants alternate and
// share the machine's noise:
//   rpc_metrics_bench --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "common/rpc.h"
#include "common/rpc_metrics.h"
#include "common/tensor_codec.h"
#include "local_ps_testing.h"
#include "ps.grpc.pb.h"

namespace pstrain {
namespace {

constexpr int kFloats = 1024;  // 4 KB

void BM_Pull4K(benchmark::State& state) {
  ps_testing::LocalPs ps;
  CreateVariablesRequest create;
  *create.mutable_sender() = MakeSender("chief", 0);
  VariableDef* def = create.add_variables();
  def->set_name("v");
  const std::vector<float> values(kFloats, 0.5f);
  EncodeTensor({kFloats}, values.data(), def->mutable_initial_value());
  def->mutable_optimizer()->set_name("sgd");
  def->mutable_optimizer()->set_learning_rate(0.01);
  CreateVariablesResponse created;
  absl::Status s = ps.status.ok() ? ps.ps->CreateVariables(create, &created) : ps.status;
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  auto stub = ParameterServerService::NewStub(MakeChannel(ps.address));
  PullRequest req;
  *req.mutable_sender() = MakeSender("worker", 0);
  req.add_names("v");
  SetRpcMetricsEnabled(state.range(0) != 0);
  for (auto _ : state) {
    grpc::ClientContext ctx;
    PullResponse resp;
    grpc::Status g = stub->Pull(&ctx, req, &resp);
    if (!g.ok()) {
      state.SkipWithError(g.error_message().c_str());
      break;
    }
  }
  SetRpcMetricsEnabled(true);
}
BENCHMARK(BM_Pull4K)->ArgName("metrics")->Arg(0)->Arg(1)->UseRealTime()->MinTime(0.5);

void BM_Observe(benchmark::State& state) {
  for (auto _ : state) {
    ObserveServedRpc("Pull", absl::StatusCode::kOk, 30, 4130, absl::Microseconds(120));
  }
}
BENCHMARK(BM_Observe);

}  // namespace
}  // namespace pstrain

BENCHMARK_MAIN();
