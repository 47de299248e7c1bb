// The async checkpoint is consistent while pushes run at full speed (slots and weights agree with
// a replay): 2 PS on 127.0.0.1, variables with Adam and with other optimizers, one worker per PS
// pushing a deterministic sequence of tagged gradients as fast as it can, while the test cuts
// several checkpoints through the Checkpoint RPC (freeze every PS, copy, release, wait for the
// part). In every part, each shard's version v says how many pushes it holds, its watermark says
// the same (batches [0, v) of its pusher's task), and replaying the first v gradients through
// the PS's own optimizer code gives its weights, slots and update count bit for bit.
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_format.h"
#include "gtest/gtest.h"
#include "ps/optimizer.h"
#include "ps_grpc_testing.h"

namespace pstrain::ps_testing {
namespace {

using Stub = ParameterServerService::Stub;

constexpr int kNumPs = 2;
constexpr int kCheckpoints = 6;

struct Spec {
  std::string name;
  int ps;
  int64_t n;
  OptimizerConfig optimizer;
};

OptimizerConfig Opt(const std::string& name, double lr, double momentum = 0) {
  OptimizerConfig o;
  o.set_name(name);
  o.set_learning_rate(lr);
  o.set_momentum(momentum);
  return o;
}

std::vector<Spec> Specs() {
  return {{"a", 0, 300, Opt("adam", 0.01)},
          {"b", 0, 70, Opt("momentum", 0.05, 0.9)},
          {"c", 1, 200, Opt("adam", 0.02)},
          {"d", 1, 40, Opt("rmsprop", 0.01)}};
}

std::vector<float> Initial(const Spec& s) {
  std::vector<float> v(s.n);
  for (int64_t j = 0; j < s.n; ++j) v[j] = 0.01f * static_cast<float>(j % 17) - 0.08f;
  return v;
}

// The gradient of batch `batch` for variable `k`: deterministic, so the replay recomputes it.
std::vector<float> GradientOf(int k, int64_t n, int64_t batch) {
  std::vector<float> g(n);
  for (int64_t j = 0; j < n; ++j) {
    g[j] = static_cast<float>(std::sin(0.37 * static_cast<double>(batch) + 0.11 * j + k));
  }
  return g;
}

// One variable replayed through a fresh optimizer of its config.
struct Replay {
  const Spec* spec;
  int k;
  std::vector<float> weights;
  std::unique_ptr<Optimizer> optimizer;
  int64_t applied = 0;
  void AdvanceTo(int64_t v) {
    for (; applied < v; ++applied) {
      const std::vector<float> g = GradientOf(k, spec->n, applied);
      optimizer->Apply(weights.data(), g.data(), spec->n, applied);
    }
  }
};

bool SameBits(const std::vector<float>& a, const float* b, int64_t n) {
  return static_cast<int64_t>(a.size()) == n && std::memcmp(a.data(), b, n * sizeof(float)) == 0;
}

TEST(CheckpointConsistencyTest, AsyncCutsAgreeWithAReplayWhilePushesRunAtFullSpeed) {
  const std::vector<Spec> specs = Specs();
  std::vector<std::unique_ptr<GrpcPs>> ps;
  for (int p = 0; p < kNumPs; ++p) ps.push_back(std::make_unique<GrpcPs>(p));
  for (int p = 0; p < kNumPs; ++p) {
    ASSERT_TRUE(ps[p]->AsChief(&Stub::Configure, Config("async", kNumPs, 0, 0, 30, {})).ok());
    CreateVariablesRequest create;
    for (const Spec& s : specs) {
      if (s.ps != p) continue;
      VariableDef* def = create.add_variables();
      def->set_name(s.name);
      EncodeTensor({s.n}, Initial(s).data(), def->mutable_initial_value());
      *def->mutable_optimizer() = s.optimizer;
    }
    ASSERT_TRUE(ps[p]->AsChief(&Stub::CreateVariables, create).ok());
  }

  // One pusher per PS: worker:p pushes batch i of task (0, p) to every variable of PS p.
  std::atomic<bool> stop{false};
  std::vector<std::atomic<int64_t>> pushed(kNumPs);
  std::vector<absl::Status> errors(kNumPs);
  std::vector<std::thread> pushers;
  for (int p = 0; p < kNumPs; ++p) {
    pushers.emplace_back([&, p] {
      for (int64_t i = 0; !stop.load(); ++i) {
        PushRequest req;
        *req.mutable_sender() = Worker(p);
        *req.mutable_tag() = Tag(0, p, i);
        for (size_t k = 0; k < specs.size(); ++k) {
          if (specs[k].ps != p) continue;
          Gradient* g = req.add_gradients();
          g->set_name(specs[k].name);
          EncodeTensor({specs[k].n}, GradientOf(k, specs[k].n, i).data(), g->mutable_gradient());
        }
        PushResponse resp;
        errors[p] = ps[p]->Call(&Stub::Push, req, &resp);
        if (!errors[p].ok()) return;
        pushed[p] = i + 1;
      }
    });
  }
  struct Joiner {  // stops and joins the pushers however the test ends
    std::atomic<bool>* stop;
    std::vector<std::thread>* threads;
    ~Joiner() {
      *stop = true;
      for (std::thread& t : *threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{&stop, &pushers};
  auto pushes_past = [&](int64_t n) {
    for (int p = 0; p < kNumPs; ++p) {
      if (pushed[p].load() < n) return false;
    }
    return true;
  };
  ASSERT_TRUE(Eventually([&] { return pushes_past(20); }));

  const std::string root = std::filesystem::temp_directory_path() / "checkpoint_consistency_test";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  std::vector<std::vector<PartFile>> cuts;  // [checkpoint][ps]
  for (uint64_t id = 1; id <= kCheckpoints; ++id) {
    const int64_t before = pushed[0].load() + pushed[1].load();
    ASSERT_TRUE(Eventually([&] { return pushed[0].load() + pushed[1].load() >= before + 20; }));
    for (int p = 0; p < kNumPs; ++p) {
      CheckpointRequest freeze;
      freeze.set_phase(CheckpointRequest::FREEZE);
      freeze.set_id(id);
      freeze.set_num_ps(kNumPs);
      freeze.set_freeze_timeout_s(30);
      for (const Spec& s : specs) {
        if (s.ps != p) continue;
        CheckpointShard* shard = freeze.add_shards();
        shard->set_name(s.name);
        shard->set_variable(s.name);
        shard->add_shape(s.n);
        shard->set_row_end(s.n);
      }
      const absl::Status frozen = ps[p]->AsChief(&Stub::Checkpoint, freeze);
      ASSERT_TRUE(frozen.ok()) << frozen;
    }
    const std::string dir = absl::StrCat(root, "/ckpt-", id);
    for (int p = 0; p < kNumPs; ++p) {
      CheckpointRequest release;
      release.set_phase(CheckpointRequest::RELEASE);
      release.set_id(id);
      release.set_dir(dir);
      release.set_global_step(id);
      const absl::Status released = ps[p]->AsChief(&Stub::Checkpoint, release);
      ASSERT_TRUE(released.ok()) << released;
    }
    std::vector<PartFile>& parts = cuts.emplace_back();
    for (int p = 0; p < kNumPs; ++p) {
      CheckpointRequest wait;
      *wait.mutable_sender() = Chief();
      wait.set_phase(CheckpointRequest::WAIT);
      wait.set_id(id);
      CheckpointResponse written;
      for (int i = 0; i < 60 && written.path().empty(); ++i) {
        ASSERT_TRUE(ps[p]->Call(&Stub::Checkpoint, wait, &written).ok());
      }
      absl::StatusOr<PartFile> part = ReadPartFile(written.path());
      ASSERT_TRUE(part.ok()) << part.status();
      parts.push_back(*std::move(part));
    }
  }
  const int64_t at_last_cut = pushed[0].load() + pushed[1].load();
  ASSERT_TRUE(Eventually([&] { return pushed[0].load() + pushed[1].load() > at_last_cut + 20; }));
  stop = true;
  for (std::thread& t : pushers) t.join();
  for (int p = 0; p < kNumPs; ++p) ASSERT_TRUE(errors[p].ok()) << errors[p];
  std::filesystem::remove_all(root);

  std::map<std::string, Replay> replays;
  for (size_t k = 0; k < specs.size(); ++k) {
    Replay& r = replays[specs[k].name];
    r.spec = &specs[k];
    r.k = static_cast<int>(k);
    r.weights = Initial(specs[k]);
    r.optimizer = *CreateOptimizer(specs[k].optimizer, specs[k].n);
  }
  std::vector<std::vector<uint64_t>> versions(kNumPs);
  for (size_t c = 0; c < cuts.size(); ++c) {
    for (int p = 0; p < kNumPs; ++p) {
      const PartFile& part = cuts[c][p];
      ASSERT_EQ(part.shards.size(), 2u);
      // One push carries every variable of a PS, and a cut never splits a push.
      EXPECT_EQ(part.shards[0].version, part.shards[1].version) << "cut " << c << ", ps " << p;
      versions[p].push_back(part.shards[0].version);
      for (const ShardRecord& shard : part.shards) {
        const std::string where = absl::StrCat("cut ", c + 1, ", shard ", shard.name);
        const int64_t v = static_cast<int64_t>(shard.version);
        EXPECT_EQ(MarksOf(shard.applied), (Marks{{0, p, v}})) << where;
        Replay& r = replays.at(shard.name);
        ASSERT_GE(v, r.applied) << where << ": the cuts went back in time";
        r.AdvanceTo(v);
        EXPECT_TRUE(SameBits(r.weights, shard.values.data(), r.spec->n)) << where << ": weights";
        EXPECT_EQ(shard.update_count, r.optimizer->update_count()) << where;
        const auto slots = r.optimizer->slots();
        ASSERT_EQ(shard.slots.size(), slots.size()) << where;
        for (size_t j = 0; j < slots.size(); ++j) {
          EXPECT_EQ(shard.slots[j].name, slots[j].first) << where;
          EXPECT_TRUE(SameBits(shard.slots[j].values, slots[j].second, r.spec->n))
              << where << ": slot " << slots[j].first;
        }
      }
    }
  }
  for (int p = 0; p < kNumPs; ++p) {
    RecordProperty(absl::StrCat("ps", p, "_cut_versions"), absl::StrJoin(versions[p], " "));
    RecordProperty(absl::StrCat("ps", p, "_pushes"), absl::StrCat(pushed[p].load()));
    // The cuts fell while the pushes ran: each one saw more of them, and pushes went on after.
    for (size_t c = 1; c < versions[p].size(); ++c) {
      EXPECT_GT(versions[p][c], versions[p][c - 1]) << "ps " << p << ", cut " << c + 1;
    }
    EXPECT_GT(static_cast<uint64_t>(pushed[p].load()), versions[p].back());
  }
  // And the final state is the replay of every push.
  for (const Spec& s : specs) {
    Replay& r = replays.at(s.name);
    r.AdvanceTo(pushed[s.ps].load());
    PullRequest pull;
    *pull.mutable_sender() = Chief();
    pull.add_names(s.name);
    PullResponse resp;
    ASSERT_TRUE(ps[s.ps]->Call(&Stub::Pull, pull, &resp).ok());
    EXPECT_EQ(resp.values(0).version(), static_cast<uint64_t>(pushed[s.ps].load()));
    EXPECT_TRUE(SameBits(r.weights,
                         reinterpret_cast<const float*>(resp.values(0).value().data().data()), s.n))
        << s.name;
  }
}

}  // namespace
}  // namespace pstrain::ps_testing
