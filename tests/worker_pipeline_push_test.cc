// The pipelined push of a step's gradients (ComputeAndPush with pipeline on, ParameterSession::
// PushSome, PsClient::PushSome) against two real PS behind gRPC on 127.0.0.1: it applies bit for
// bit what one Write after the backward pass applies, with variables split into shards and PS
// requests that mix variables; the MLP reports its layers early only when it can promise finite
// gradients; and a step with a non-finite gradient, in the layer computed first or in the one
// computed last, applies nothing on the PS.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_testing.h"
#include "testing.h"
#include "worker/step_push.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kInputs = 20, kClasses = 3, kBatch = 8;

ModelConfig MlpConfig() {
  ModelConfig c;
  c.kind = "mlp";
  c.dense_features = kInputs;
  c.num_classes = kClasses;
  c.hidden = {16, 8};
  return c;
}

Examples Batch(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Examples e;
  e.dense_dim = kInputs;
  for (int r = 0; r < kBatch; ++r) {
    for (int c = 0; c < kInputs; ++c) e.dense.push_back(normal(rng));
    e.labels.push_back(static_cast<float>(rng() % kClasses));
    e.sparse_offsets.push_back(0);
  }
  return e;
}

// Two PS in async mode with the MLP's variables: dense0/kernel split by rows over both, the rest
// alternating, so ps:0's request mixes dense0/kernel's first shard with other variables.
class PipelinePushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    addresses_.clear();
    vars_.clear();
    model_ = *Model::Create(MlpConfig());
    const std::vector<int> ports = testing::FreePorts(2);
    const ConfigureRequest config =
        ps_testing::Config("async", 1, 0, 0, 10, {ps_testing::Worker(0)});
    for (int p = 0; p < 2; ++p) {
      ps_[p] = ps_testing::MakePs(&config);
      service_[p] = MakeParameterServerService(ps_[p].get(), nullptr);
      addresses_.push_back(absl::StrCat("127.0.0.1:", ports[p]));
      server_[p] = *StartGrpcServer(addresses_[p], {service_[p].get()});
    }
    const std::vector<ParamSpec>& params = model_->params();
    initial_ = model_->Initialize(7);
    for (size_t i = 0; i < params.size(); ++i) {
      VariableRef v{params[i].name, params[i].shape, {}};
      const int64_t rows = params[i].shape[0];
      if (i == 0) {  // dense0/kernel: rows [0, 12) on ps:0, [12, 20) on ps:1
        v.shards = {{params[i].name + "/part_0", 0, 0, 12},
                    {params[i].name + "/part_1", 1, 12, rows}};
      } else {
        v.shards = {{params[i].name, static_cast<int>(i % 2), 0, rows}};
      }
      vars_.push_back(v);
    }
  }
  void TearDown() override {
    for (int p = 0; p < 2; ++p) {
      ps_[p]->Stop();
      server_[p]->Shutdown();
    }
  }

  // Creates every shard with `values` (per variable) and Adam, whose per-variable state makes
  // any difference in what was applied, or how often, show.
  void CreateVariables(const std::vector<Tensor>& values) {
    for (size_t i = 0; i < vars_.size(); ++i) {
      const int64_t row = NumElements(vars_[i].shape) / vars_[i].shape[0];
      for (const ShardRef& s : vars_[i].shards) {
        std::vector<int64_t> shape = vars_[i].shape;
        shape[0] = s.row_end - s.row_begin;
        Tensor t(shape, 0.0f);
        std::memcpy(t.data(), values[i].data() + s.row_begin * row, t.size() * sizeof(float));
        CreateVariablesRequest req = ps_testing::CreateReq(s.name, t);
        req.mutable_variables(0)->mutable_optimizer()->set_name("adam");
        req.mutable_variables(0)->mutable_optimizer()->set_learning_rate(0.01);
        CreateVariablesResponse resp;
        ASSERT_TRUE(ps_[s.ps_task]->CreateVariables(req, &resp).ok());
      }
    }
  }

  // Every shard's values and version as the PS holds them, in order.
  std::vector<PullResponse> Snapshot() {
    std::vector<PullResponse> out;
    for (const VariableRef& v : vars_) {
      for (const ShardRef& s : v.shards) {
        PullRequest req;
        *req.mutable_sender() = ps_testing::Chief();
        req.add_names(s.name);
        PullResponse resp;
        EXPECT_TRUE(ps_[s.ps_task]->Pull(req, &resp).ok());
        out.push_back(resp);
      }
    }
    return out;
  }

  int64_t PushRequests() {
    int64_t n = 0;
    for (int p = 0; p < 2; ++p) {
      StatsRequest req;
      *req.mutable_sender() = ps_testing::Chief();
      StatsResponse resp;
      EXPECT_TRUE(ps_[p]->Stats(req, &resp).ok());
      for (int64_t v : resp.pushes_by_worker()) n += v;
    }
    return n;
  }

  // One pipelined step of `model` on 3 examples, read and pushed through fresh parameters.
  StepPushResult PipelinedStep(Model& model, int64_t bucket_bytes = 0) {
    std::unique_ptr<ParameterSession> params = Parameters();
    Examples batch = Batch(3);
    const std::vector<std::vector<uint64_t>>& keys = model.TouchedKeys(batch);
    ModelInputs in;
    EXPECT_TRUE(params->Read(keys, {}, &in.params, &in.rows).ok());
    ModelGrads grads;
    StepPushOptions how;
    how.pipeline = true;
    how.bucket_bytes = bucket_bytes;
    return ComputeAndPush(model, in, batch, keys, &grads, *params, how);
  }
  std::unique_ptr<ParameterSession> Parameters() {
    SessionOptions o;
    o.ps_addresses = addresses_;
    o.sender = ps_testing::Worker(0);
    o.timeout = absl::Seconds(20);
    return std::make_unique<ParameterSession>(std::move(o), vars_, std::vector<TableRef>{});
  }

  // `steps` steps on seeded batches; the results of each.
  std::vector<StepPushResult> Train(Model& model, int steps, bool pipeline) {
    std::unique_ptr<ParameterSession> params = Parameters();
    std::vector<StepPushResult> results;
    ModelInputs in;
    ModelGrads grads;
    for (int s = 0; s < steps; ++s) {
      Examples batch = Batch(100 + s);
      const std::vector<std::vector<uint64_t>>& keys = model.TouchedKeys(batch);
      EXPECT_TRUE(params->Read(keys, {}, &in.params, &in.rows).ok());
      StepPushOptions how;
      how.pipeline = pipeline;
      results.push_back(ComputeAndPush(model, in, batch, keys, &grads, *params, how));
      EXPECT_TRUE(results.back().status.ok()) << results.back().status;
    }
    return results;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ParameterServer> ps_[2];
  std::unique_ptr<grpc::Service> service_[2];
  std::unique_ptr<grpc::Server> server_[2];
  std::vector<std::string> addresses_;
  std::vector<VariableRef> vars_;
  std::vector<Tensor> initial_;
};

void ExpectSameValues(const std::vector<PullResponse>& a, const std::vector<PullResponse>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].values(0).version(), b[i].values(0).version()) << "shard " << i;
    EXPECT_EQ(a[i].values(0).value().data(), b[i].values(0).value().data())
        << "shard " << i << " differs";
  }
}

TEST_F(PipelinePushTest, PipelinedPushAppliesBitForBitWhatOneWriteApplies) {
  CreateVariables(initial_);
  const std::vector<StepPushResult> plain = Train(*model_, 6, /*pipeline=*/false);
  const std::vector<PullResponse> want = Snapshot();
  const int64_t plain_requests = PushRequests();
  EXPECT_EQ(plain_requests, 6 * 2);  // one request per PS per step
  EXPECT_EQ(want[0].values(0).version(), 6u);

  // The same again from the same initial values, pipelined.
  TearDown();
  SetUp();
  CreateVariables(initial_);
  const std::vector<StepPushResult> piped = Train(*model_, 6, /*pipeline=*/true);
  ExpectSameValues(Snapshot(), want);
  // One request per layer and PS holding its shards: the pushes went out layer by layer.
  EXPECT_GT(PushRequests(), plain_requests);
  for (size_t s = 0; s < piped.size(); ++s) {
    EXPECT_EQ(piped[s].loss, plain[s].loss) << "step " << s;
    EXPECT_EQ(piped[s].nonfinite, "");
  }
}

// Reports what the model passes to `ready` and when.
struct Recorder {
  std::vector<std::vector<int>> calls;
  GradientsReady Ready() {
    return [this](const std::vector<int>& v) { calls.push_back(v); };
  }
};

TEST_F(PipelinePushTest, TheMlpReportsItsLayersLastFirstOnlyWhenItCanPromiseFiniteGradients) {
  std::vector<const float*> values;
  for (const Tensor& t : initial_) values.push_back(t.data());
  Examples batch = Batch(1);
  model_->TouchedKeys(batch);
  ModelGrads grads;
  Recorder r;
  model_->ForwardBackward({values, {}}, batch, &grads, r.Ready());
  EXPECT_THAT(r.calls, ElementsAre(ElementsAre(4, 5), ElementsAre(2, 3), ElementsAre(0, 1)));

  // An input near float's largest value: no promise, every parameter at the end.
  batch.dense[3] = std::numeric_limits<float>::max() / 2;
  Recorder huge;
  model_->ForwardBackward({values, {}}, batch, &grads, huge.Ready());
  EXPECT_THAT(huge.calls, ElementsAre(ElementsAre(0, 1, 2, 3, 4, 5)));
}

// A finite forward pass whose last-computed gradient (dense0/kernel) overflows: input column 3
// is float's largest value in every row, dense0/kernel's row 3 is zero (so the forward pass
// never sees it), and the upper kernels are scaled up so that the gradient reaching dense0 is
// large. The MLP cannot promise finite gradients, reports them at the end, and nothing is pushed.
TEST_F(PipelinePushTest, AnOverflowInTheLayerComputedLastPushesNothing) {
  std::vector<Tensor> values = initial_;
  for (int c = 0; c < 16; ++c) values[0].values[3 * 16 + c] = 0;
  for (float& v : values[2].values) v *= 100;
  for (float& v : values[4].values) v *= 100;
  CreateVariables(values);
  const std::vector<PullResponse> before = Snapshot();

  std::unique_ptr<ParameterSession> params = Parameters();
  Examples batch = Batch(5);
  for (int r = 0; r < kBatch; ++r) batch.dense[r * kInputs + 3] = std::numeric_limits<float>::max();
  const std::vector<std::vector<uint64_t>>& keys = model_->TouchedKeys(batch);
  ModelInputs in;
  ASSERT_TRUE(params->Read(keys, {}, &in.params, &in.rows).ok());
  ModelGrads grads;
  StepPushOptions how;
  how.pipeline = true;
  const StepPushResult r = ComputeAndPush(*model_, in, batch, keys, &grads, *params, how);
  EXPECT_TRUE(std::isfinite(r.loss)) << r.loss;
  EXPECT_THAT(r.nonfinite, HasSubstr("gradient for variable 'dense0/kernel' has"));
  EXPECT_TRUE(r.pushed_before.empty());
  EXPECT_TRUE(r.status.ok()) << r.status;
  ExpectSameValues(Snapshot(), before);
  EXPECT_EQ(PushRequests(), 0);
}

// The MLP with a NaN put into one gradient after the backward pass (none for -1), reporting its
// layers one by one as a model that promised finite gradients would, or (`report` false) not
// at all.
class NanInjectingModel final : public Model {
 public:
  NanInjectingModel(std::unique_ptr<Model> mlp, int bad_param, bool report = true)
      : mlp_(std::move(mlp)), bad_(bad_param), report_(report) {}
  ModelTask task() const override { return mlp_->task(); }
  const std::vector<ParamSpec>& params() const override { return mlp_->params(); }
  const std::vector<TableSpec>& tables() const override { return mlp_->tables(); }
  std::vector<Tensor> Initialize(uint64_t seed) const override { return mlp_->Initialize(seed); }
  const std::vector<std::vector<uint64_t>>& TouchedKeys(const Examples& b) override {
    return mlp_->TouchedKeys(b);
  }
  float ForwardBackward(const ModelInputs& in, const Examples& batch, ModelGrads* g,
                        const GradientsReady& ready) override {
    const float loss = mlp_->ForwardBackward(in, batch, g);
    if (bad_ >= 0) g->params[bad_].values[1] = std::nanf("");
    for (int layer = 2; layer >= 0 && report_; --layer) ready({2 * layer, 2 * layer + 1});
    return loss;
  }
  void Predict(const ModelInputs& in, const Examples& b, std::vector<float>* out) override {
    mlp_->Predict(in, b, out);
  }

 private:
  std::unique_ptr<Model> mlp_;
  const int bad_;
  const bool report_;
};

TEST_F(PipelinePushTest, ANanInTheLayerReportedFirstPushesNothing) {
  CreateVariables(initial_);
  const std::vector<PullResponse> before = Snapshot();
  NanInjectingModel model(*Model::Create(MlpConfig()), /*bad_param=*/4);  // dense2/kernel
  const StepPushResult r = PipelinedStep(model);
  EXPECT_EQ(r.nonfinite, "gradient for variable 'dense2/kernel' has nan at index 1");
  EXPECT_TRUE(r.pushed_before.empty());
  ExpectSameValues(Snapshot(), before);
  EXPECT_EQ(PushRequests(), 0);
}

// A model that breaks its promise (a NaN in the layer it reports last) had its earlier layers
// pushed: the rest is not, and the result names what was applied so the step can say so.
TEST_F(PipelinePushTest, ABrokenPromiseStopsThePushAndNamesWhatWasApplied) {
  CreateVariables(initial_);
  NanInjectingModel model(*Model::Create(MlpConfig()), /*bad_param=*/0);  // dense0/kernel
  const StepPushResult r = PipelinedStep(model);
  EXPECT_EQ(r.nonfinite, "gradient for variable 'dense0/kernel' has nan at index 1");
  EXPECT_THAT(r.pushed_before,
              ElementsAre("dense2/kernel", "dense2/bias", "dense1/kernel", "dense1/bias"));
  const std::vector<PullResponse> after = Snapshot();
  EXPECT_EQ(after[0].values(0).version(), 0u);  // dense0/kernel's shards: untouched
  EXPECT_EQ(after[1].values(0).version(), 0u);
  EXPECT_EQ(after[2].values(0).version(), 0u);  // dense0/bias
  EXPECT_EQ(after[3].values(0).version(), 1u);  // dense1/kernel
}

// Reported gradients wait in the bucket until it holds bucket_bytes. dense2 (27 floats, 108
// bytes) is reported first, then dense1 (136 floats, 544 bytes), then dense0, whose kernel holds
// the broken promise's NaN.
TEST_F(PipelinePushTest, ABucketHoldsSmallLayersBackUntilItIsFull) {
  CreateVariables(initial_);
  NanInjectingModel model(*Model::Create(MlpConfig()), /*bad_param=*/0);  // dense0/kernel
  // A bucket larger than the model: nothing leaves before the backward pass ends, so the NaN
  // stops the whole step.
  const StepPushResult whole = PipelinedStep(model, /*bucket_bytes=*/1 << 20);
  EXPECT_EQ(whole.nonfinite, "gradient for variable 'dense0/kernel' has nan at index 1");
  EXPECT_TRUE(whole.pushed_before.empty());
  EXPECT_EQ(PushRequests(), 0);
  // 600 bytes: dense2 waits for dense1, and the two go in one push, one request per PS.
  const StepPushResult two = PipelinedStep(model, /*bucket_bytes=*/600);
  EXPECT_THAT(two.pushed_before,
              ElementsAre("dense2/kernel", "dense2/bias", "dense1/kernel", "dense1/bias"));
  EXPECT_EQ(PushRequests(), 2);
  const std::vector<PullResponse> after = Snapshot();
  EXPECT_EQ(after[0].values(0).version(), 0u);  // dense0/kernel's shards: untouched
  EXPECT_EQ(after[2].values(0).version(), 0u);  // dense0/bias
  EXPECT_EQ(after[3].values(0).version(), 1u);  // dense1/kernel
}

// A model that reports no gradient ready still has every one pushed, after its backward pass.
TEST_F(PipelinePushTest, GradientsAModelDidNotReportArePushedAtTheEnd) {
  CreateVariables(initial_);
  NanInjectingModel model(*Model::Create(MlpConfig()), /*bad_param=*/-1, /*report=*/false);
  const std::vector<StepPushResult> r = Train(model, 1, /*pipeline=*/true);
  EXPECT_EQ(r[0].nonfinite, "");
  for (const PullResponse& shard : Snapshot()) EXPECT_EQ(shard.values(0).version(), 1u);
}

}  // namespace
}  // namespace pstrain
