// EmbeddingTable: validation, lookups with admission, updates with the row optimizers, eviction,
// the sync accumulator and the counters. Rows are stored by RowStore (embedding_rows.h).
//
// Locking: one absl::Mutex per table. Apply, Accumulate and ApplyAccumulated hold it exclusively
// for the whole batch. Lookup first holds it shared, which serves a batch whose keys all have
// rows (lookups then run concurrently); at the first key without a row it starts again holding
// it exclusively (such a key may get a row, evict others, or count towards admission), so a
// lookup costs up to that key's position twice. CheckPush, Stats, Row and version hold it
// shared. Either way a batch is atomic with respect to updates. A batch costs O(n) hash probes and
// row copies under the lock, and no allocation except when the arena, the index or the accumulator
// grows (amortised, never per key).
//
// Admission counts (admit_after > 1) live in a map of at most kMaxPendingKeys keys per table
// (fewer under a byte cap, which they may take a quarter of), so a stream of distinct keys seen
// once cannot grow memory. When a key that is not in the map must be added to a full map, every
// pending count is halved and the keys whose count falls to zero are forgotten, repeatedly, until
// the map is at most half full (each pass at least halves the counts, which stay below admit_after,
// so at most log2(admit_after) + 1 passes; each purge frees half the map, so its cost is O(1)
// amortised per lookup). This is TinyLFU's "reset": frequent keys keep half their evidence, keys
// seen once in the last ~kMaxPendingKeys / 2 new keys are forgotten. A map rather than a count-min
// sketch, because a sketch that holds no keys overcounts colliding ones under a long stream of
// distinct keys and would then admit them early; the map never admits a key before its k-th lookup,
// it may only admit it late. A key whose row was evicted starts counting again.
//
// Caps: max_rows bounds the rows directly; max_bytes bounds them through RowStore::BytesBound,
// the most memory the rows, their index, the chunk list and the admission map can take for a
// given row count whatever the history, so Stats().bytes stays <= max_bytes while the sync
// accumulator is empty (it holds one step's pushed gradients, is counted in bytes, and is not
// capped). When a new row would pass the cap, the least recently updated rows go first.
#include "ps/embedding_table.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/limits.h"
#include "common/optimizer_config.h"
#include "ps/embedding_layout.h"
#include "ps/embedding_rows.h"
#include "ps/optimizer.h"
#include "ps/optimizer_kernels.h"
#include "ps/ps_internal.h"

namespace pstrain {
namespace {

constexpr uint32_t kAdamCachedSteps = 4096;
// Adam's bias corrections at a step count t: 1 - beta1^t, and sqrt(1 - beta2^t) as AdamKernel
// takes it.
struct BiasCorrection {
  double bc1;
  float bc2_sqrt;
};

using Rule = RowRule;

double Or(bool has, double value, double def) { return has ? value : def; }

class Table final : public EmbeddingTable {
 public:
  Table(const TableDef& def, const TableLayout& layout)
      : def_(def),
        rule_(layout.rule),
        dim_(def.dim()),
        fpr_((1 + layout.slots) * def.dim()),
        admit_after_(def.admit_after()),
        evict_after_(static_cast<uint32_t>(
            std::min<int64_t>(def.evict_after_steps(), std::numeric_limits<uint32_t>::max()))),
        max_rows_(layout.max_rows),
        max_pending_(layout.max_pending),
        evicts_(def.evict_after_steps() > 0 || def.max_rows() > 0 || def.max_bytes() > 0),
        may_miss_(evicts_ || def.admit_after() > 1),
        rows_(fpr_, layout.rule == Rule::kAdam, evicts_, layout.chunk_slots) {
    const OptimizerConfig& o = def.optimizer();
    const bool adagrad = rule_ == Rule::kAdagrad;
    eps_ = Or(o.has_epsilon(), o.epsilon(), adagrad ? kDefaultAdagradEpsilon : kDefaultAdamEpsilon);
    beta1_ = Or(o.has_beta1(), o.beta1(), kDefaultAdamBeta1);
    beta2_ = Or(o.has_beta2(), o.beta2(), kDefaultAdamBeta2);
    power_ =
        Or(o.has_learning_rate_power(), o.learning_rate_power(), kDefaultFtrlLearningRatePower);
    const double acc = o.initial_accumulator_value();
    if (rule_ == Rule::kAdam) {
      bias_.resize(kAdamCachedSteps);
      for (uint32_t t = 1; t < kAdamCachedSteps; ++t) bias_[t] = Bias(t);
    }
    if (rule_ == Rule::kAdagrad) first_slot_value_ = static_cast<float>(acc);
    if (rule_ == Rule::kFtrl) {
      first_slot_value_ = static_cast<float>(acc == 0.0 ? kDefaultFtrlInitialAccumulator : acc);
    }
  }

  const TableDef& def() const override { return def_; }
  int floats_per_row() const override { return fpr_; }

  uint64_t Lookup(const uint64_t* keys, int64_t n, float* out) override {
    keys_looked_up_.fetch_add(n, std::memory_order_relaxed);
    const int64_t row_bytes = int64_t{dim_} * kFloatBytes;
    {
      // Under the shared lock while every key has a row, so lookups run concurrently; the first
      // key without one sends the whole batch to the exclusive path below.
      absl::ReaderMutexLock lock(&mu_);
      const bool complete = ForEachKey(
          keys, n, row_bytes, false, [&](int64_t i, uint32_t slot) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
            if (slot == RowStore::kNil) return false;
            std::memcpy(out + i * dim_, rows_.floats(slot), row_bytes);
            return true;
          });
      if (complete) return version_;
    }
    absl::MutexLock lock(&mu_);
    ForEachKey(keys, n, row_bytes, false,
               [&](int64_t i, uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                 float* o = out + i * dim_;
                 if (slot == RowStore::kNil) slot = Miss(keys[i], o);
                 // Copied now: a later key of this batch may evict this row to make room.
                 if (slot != RowStore::kNil) std::memcpy(o, rows_.floats(slot), row_bytes);
                 return true;
               });
    return version_;
  }

  absl::Status CheckPush(const uint64_t* keys, int64_t n) const override {
    if (may_miss_) return absl::OkStatus();
    absl::ReaderMutexLock lock(&mu_);
    for (int64_t i = 0; i < n; ++i) {
      if (rows_.Find(keys[i]) == RowStore::kNil) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", Quoted(def_.name()), ": key ", keys[i], " was never looked up"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckUpdate(const uint64_t* keys, int64_t n, const float* grads) const override {
    absl::ReaderMutexLock lock(&mu_);
    return CheckLocked(keys, n, grads);
  }

  absl::StatusOr<uint64_t> Apply(const uint64_t* keys, int64_t n, const float* grads) override {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckLocked(keys, n, grads); !s.ok()) return s;
    return ApplyLocked(keys, n, grads);
  }

  void Accumulate(const uint64_t* keys, int64_t n, const float* grads) override {
    absl::MutexLock lock(&mu_);
    for (int64_t i = 0; i < n; ++i) {
      const float* g = grads + i * dim_;
      auto [it, added] = acc_index_.try_emplace(keys[i], static_cast<uint32_t>(acc_keys_.size()));
      if (added) {
        acc_keys_.push_back(keys[i]);
        acc_grads_.insert(acc_grads_.end(), g, g + dim_);
        continue;
      }
      float* sum = acc_grads_.data() + int64_t{it->second} * dim_;
      for (int j = 0; j < dim_; ++j) sum[j] += g[j];
    }
  }

  uint64_t ApplyAccumulated(int contributors, bool* refused) override {
    absl::MutexLock lock(&mu_);
    if (contributors > 1) {
      const float c = static_cast<float>(contributors);
      for (float& x : acc_grads_) x /= c;
    }
    const int64_t n = static_cast<int64_t>(acc_keys_.size());
    const bool finite = CheckLocked(acc_keys_.data(), n, acc_grads_.data()).ok();
    if (refused != nullptr) *refused = !finite;
    const uint64_t version = finite ? ApplyLocked(acc_keys_.data(), n, acc_grads_.data())
                                    : ++version_;  // the step counts, without its update
    const size_t keys = acc_keys_.size();
    acc_keys_.clear();
    acc_grads_.clear();
    acc_index_.clear();
    acc_index_.reserve(keys);  // the next step likely pushes as many keys: no rehash while adding
    return version;
  }

  uint64_t version() const override {
    absl::ReaderMutexLock lock(&mu_);
    return version_;
  }

  TableStats Stats() const override {
    absl::ReaderMutexLock lock(&mu_);
    TableStats s;
    s.set_name(def_.name());
    s.set_dim(dim_);
    s.set_version(version_);
    s.set_rows(rows_.rows());
    s.set_bytes(BytesLocked());
    s.set_payload_bytes_per_row(int64_t{fpr_} * kFloatBytes);
    s.set_keys_looked_up(keys_looked_up_.load(std::memory_order_relaxed));
    s.set_admitted(counters_.admitted);
    s.set_filtered_lookups(counters_.filtered_lookups);
    s.set_filtered_gradients(counters_.filtered_gradients);
    s.set_evicted_by_age(counters_.evicted_by_age);
    s.set_evicted_by_cap(counters_.evicted_by_cap);
    s.set_gradient_rows_applied(counters_.gradient_rows_applied);
    return s;
  }

  std::optional<RowState> Row(uint64_t key) const override {
    absl::ReaderMutexLock lock(&mu_);
    const uint32_t slot = rows_.Find(key);
    if (slot == RowStore::kNil) return std::nullopt;
    const float* f = rows_.floats(slot);
    RowState state;
    state.row.assign(f, f + dim_);
    auto slot_values = [&](const char* name, int index) {
      const float* s = f + int64_t{index + 1} * dim_;
      state.slots.emplace_back(name, std::vector<float>(s, s + dim_));
    };
    switch (rule_) {
      case Rule::kSgd:
        break;
      case Rule::kAdagrad:
        slot_values("sum", 0);
        break;
      case Rule::kAdam:
        slot_values("exp_avg", 0);
        slot_values("exp_avg_sq", 1);
        state.slots.emplace_back("step",
                                 std::vector<float>{static_cast<float>(rows_.step_count(slot))});
        break;
      case Rule::kFtrl:
        slot_values("accumulator", 0);
        slot_values("linear", 1);
        break;
    }
    return state;
  }

  void Export(TableRecord* out) const override {
    absl::ReaderMutexLock lock(&mu_);
    out->name = def_.name();
    out->dim = dim_;
    out->floats_per_row = fpr_;
    out->version = version_;
    const size_t n = static_cast<size_t>(rows_.rows());
    out->keys.resize(n);
    out->floats.resize(n * fpr_);
    out->last_update.resize(n);
    out->step_counts.resize(rule_ == Rule::kAdam ? n : 0);
    size_t i = 0;
    rows_.ForEachRow([&](uint64_t key, uint32_t slot) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      out->keys[i] = key;
      std::memcpy(out->floats.data() + i * fpr_, rows_.floats(slot), sizeof(float) * fpr_);
      out->last_update[i] = version_ - rows_.age(slot, version_);
      if (rule_ == Rule::kAdam) out->step_counts[i] = rows_.step_count(slot);
      ++i;
    });
  }

  void Import(uint64_t version, const uint64_t* keys, int64_t n, const float* floats,
              const uint32_t* step_counts, const uint64_t* last_update) override {
    absl::MutexLock lock(&mu_);
    version_ = version;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t slot = rows_.Find(keys[i]);
      if (slot == RowStore::kNil) {
        MakeRoom();
        slot = rows_.Add(keys[i], last_update[i]);
        if (slot == RowStore::kNil) return;
        counters_.admitted += 1;
      }
      std::memcpy(rows_.floats(slot), floats + i * fpr_, sizeof(float) * fpr_);
      if (rule_ == Rule::kAdam) rows_.step_count(slot) = step_counts ? step_counts[i] : 0;
    }
  }

 private:
  // Calls visit(i, slot of keys[i] or kNil) for i = 0..n-1 in order until it returns false (and
  // then returns false), as a software pipeline that hides memory latency: while key i is
  // visited, the slot of key i + kAhead is looked up and its first `row_bytes` (and bookkeeping,
  // with `meta`) fetched, and the index buckets of key i + 2 kAhead. A slot looked up ahead is
  // looked up again if `visit` removed rows meanwhile (a new row may evict others); keys are
  // distinct, so a key absent ahead is still absent.
  template <typename Visit>
  bool ForEachKey(const uint64_t* keys, int64_t n, int64_t row_bytes, bool meta, Visit visit) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    constexpr int64_t kAhead = 8;
    uint32_t ahead[kAhead];
    uint64_t removals[kAhead];  // rows_.removals() when ahead[] was looked up
    auto find = [&](int64_t j) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      const uint32_t slot = rows_.Find(keys[j]);
      ahead[j % kAhead] = slot;
      removals[j % kAhead] = rows_.removals();
      if (slot != RowStore::kNil) rows_.PrefetchSlot(slot, row_bytes, meta);
    };
    for (int64_t j = 0; j < std::min(n, 2 * kAhead); ++j) rows_.Prefetch(keys[j]);
    for (int64_t j = 0; j < std::min(n, kAhead); ++j) find(j);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t slot = ahead[i % kAhead];
      if (slot != RowStore::kNil && removals[i % kAhead] != rows_.removals()) {
        slot = rows_.Find(keys[i]);
      }
      if (i + kAhead < n) find(i + kAhead);
      if (i + 2 * kAhead < n) rows_.Prefetch(keys[i + 2 * kAhead]);
      if (!visit(i, slot)) return false;
    }
    return true;
  }

  // A lookup of `key`, which has no row: counts towards its admission and gives it a row once
  // admitted; otherwise fills `out` with what an unadmitted key reads. Returns the new slot or
  // kNil.
  uint32_t Miss(uint64_t key, float* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    uint32_t slot = RowStore::kNil;
    if (admit_after_ <= 1 || CountLookup(key)) slot = NewRow(key);
    if (slot != RowStore::kNil) return slot;
    counters_.filtered_lookups += 1;
    if (def_.unadmitted_zeros()) {
      std::fill(out, out + dim_, 0.0f);
    } else {
      InitialRow(def_.initializer(), key, dim_, out);
    }
    return RowStore::kNil;
  }

  // Counts a lookup of an unadmitted key; true when this is its admit_after-th.
  bool CountLookup(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = pending_.find(key);
    if (it == pending_.end()) {
      if (static_cast<int64_t>(pending_.size()) >= max_pending_) ForgetPending();
      pending_.emplace(key, 1);
      return false;
    }
    if (static_cast<int32_t>(++it->second) < admit_after_) return false;
    pending_.erase(it);
    return true;
  }

  void ForgetPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (static_cast<int64_t>(pending_.size()) > max_pending_ / 2) {
      for (auto it = pending_.begin(); it != pending_.end();) {
        it->second /= 2;
        if (it->second == 0) {
          pending_.erase(it++);
        } else {
          ++it;
        }
      }
    }
  }

  // Evicts the least recently updated rows until a new row fits under the cap.
  void MakeRoom() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (rows_.rows() >= max_rows_ && rows_.oldest() != RowStore::kNil) {
      rows_.Remove(rows_.oldest());
      counters_.evicted_by_cap += 1;
    }
  }

  // A row for `key`, drawn from the initializer, after evicting the least recently updated rows
  // as the cap requires; kNil if the store is full and cannot evict.
  uint32_t NewRow(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    MakeRoom();
    const uint32_t slot = rows_.Add(key, version_);
    if (slot == RowStore::kNil) return slot;
    float* f = rows_.floats(slot);
    InitialRow(def_.initializer(), key, dim_, f);
    if (fpr_ > dim_) {
      std::fill(f + dim_, f + 2 * dim_, first_slot_value_);
      std::fill(f + 2 * dim_, f + fpr_, 0.0f);
    }
    if (rule_ == Rule::kAdam) rows_.step_count(slot) = 0;
    counters_.admitted += 1;
    return slot;
  }

  // The next update's rate, its n gradient rows clipped as one (the norm of the whole push).
  StepRate RateAndScale(int64_t n, const float* grads) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return RateOfStep(def_.optimizer(), static_cast<int64_t>(version_), [&] {
      double sum_sq = 0.0;
      for (int64_t i = 0; i < n * dim_; ++i) sum_sq += static_cast<double>(grads[i]) * grads[i];
      return sum_sq;
    });
  }

  // CheckUpdate under the lock: the update of every row computed, nothing written. (Keys of one
  // push are distinct, so each row's check sees the state its update starts from.)
  absl::Status CheckLocked(const uint64_t* keys, int64_t n, const float* grads) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const StepRate rate = RateAndScale(n, grads);
    int64_t bad = -1;
    ForEachKey(keys, n, int64_t{fpr_} * kFloatBytes, false,
               [&](int64_t i, uint32_t slot) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
                 if (slot == RowStore::kNil) return true;
                 const uint32_t t = rule_ == Rule::kAdam ? rows_.step_count(slot) + 1 : 0;
                 // UpdateRow without `write` only reads the row.
                 float* row = const_cast<float*>(rows_.floats(slot));
                 if (UpdateRow(row, t, grads + i * dim_, rate.grad_scale, rate.lr, false))
                   return true;
                 bad = i;
                 return false;
               });
    if (bad < 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("table ", Quoted(def_.name()), ": the update of key ", keys[bad], "'s row by ",
                     def_.optimizer().name(),
                     " would make its value or an optimizer slot non-finite at version ", version_,
                     "; nothing of the push was applied"));
  }

  uint64_t ApplyLocked(const uint64_t* keys, int64_t n, const float* grads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const StepRate rate = RateAndScale(n, grads);
    const uint64_t step = version_ + 1;
    int64_t applied = 0;
    ForEachKey(keys, n, int64_t{fpr_} * kFloatBytes, evicts_,
               [&](int64_t i, uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                 if (slot == RowStore::kNil) return true;
                 // The row's own step count: lazy Adam, as TensorFlow's sparse Adam.
                 const uint32_t t = rule_ == Rule::kAdam ? ++rows_.step_count(slot) : 0;
                 UpdateRow(rows_.floats(slot), t, grads + i * dim_, rate.grad_scale, rate.lr, true);
                 rows_.Touch(slot, step);
                 ++applied;
                 return true;
               });
    counters_.gradient_rows_applied += applied;
    counters_.filtered_gradients += (n - applied);
    version_ = step;
    if (evict_after_ > 0) {
      for (uint32_t s = rows_.oldest();
           s != RowStore::kNil && rows_.age(s, version_) >= evict_after_; s = rows_.oldest()) {
        rows_.Remove(s);
        counters_.evicted_by_age += 1;
      }
    }
    return version_;
  }

  // The update of one row `w` (its weights, then its slots), Adam at the row's step count t:
  // written (returns true) or, without `write`, only checked (the kernels' check: nothing
  // written, true if every new value would be finite).
  bool UpdateRow(float* w, uint32_t t, const float* g, float gs, double lr, bool write) const {
    const float neg_lr = static_cast<float>(-lr);
    switch (rule_) {
      case Rule::kSgd:
        return SgdKernel(w, g, dim_, gs, neg_lr, write);
      case Rule::kAdagrad:
        return AdagradKernel(w, g, w + dim_, dim_, gs, static_cast<float>(eps_), neg_lr, write);
      case Rule::kAdam: {
        const BiasCorrection bc = t < bias_.size() ? bias_[t] : Bias(t);
        return AdamKernel(w, g, w + dim_, w + 2 * dim_, dim_, gs, static_cast<float>(1.0 - beta1_),
                          static_cast<float>(beta2_), static_cast<float>(1.0 - beta2_), bc.bc2_sqrt,
                          static_cast<float>(eps_), static_cast<float>(-lr / bc.bc1), write);
      }
      case Rule::kFtrl:
        return FtrlKernel(w, g, w + dim_, w + 2 * dim_, dim_, gs, lr, def_.optimizer().l1(),
                          def_.optimizer().l2(), power_, write);
    }
    return true;
  }

  int64_t BytesLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(sizeof(*this) - sizeof(RowStore)) + rows_.bytes() +
           RowStore::IndexBytes(pending_.capacity()) + RowStore::IndexBytes(acc_index_.capacity()) +
           static_cast<int64_t>(bias_.capacity() * sizeof(BiasCorrection)) +
           static_cast<int64_t>(acc_keys_.capacity() * sizeof(uint64_t) +
                                acc_grads_.capacity() * sizeof(float));
  }

  // Constant after construction.
  const TableDef def_;
  const Rule rule_;
  const int dim_;
  const int fpr_;
  const int32_t admit_after_;
  // 0: never. Rows reach at most this age (the update that makes a row this old evicts it), so
  // RowStore's 32-bit ages are exact; a longer time is taken as 2^32 - 1 steps.
  const uint32_t evict_after_;
  const int64_t max_rows_;
  const int64_t max_pending_;
  const bool evicts_;    // by age or cap: the store keeps the eviction order
  const bool may_miss_;  // admission or eviction: a pushed key may rightly have no row
  double eps_, beta1_, beta2_, power_;
  // Adam's bias corrections for step counts below kAdamCachedSteps (two pow calls per row
  // otherwise).
  BiasCorrection Bias(uint32_t t) const {
    const double td = static_cast<double>(t);
    return {1.0 - std::pow(beta1_, td), static_cast<float>(std::sqrt(1.0 - std::pow(beta2_, td)))};
  }
  std::vector<BiasCorrection> bias_;  // indexed by t; empty unless adam
  float first_slot_value_ = 0.0f;     // adagrad's sum and ftrl's accumulator start here

  mutable absl::Mutex mu_;
  RowStore rows_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  struct Counters {
    int64_t admitted = 0, filtered_lookups = 0, filtered_gradients = 0;
    int64_t evicted_by_age = 0, evicted_by_cap = 0, gradient_rows_applied = 0;
  };
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> keys_looked_up_{0};  // counted under either lock
  absl::flat_hash_map<uint64_t, uint32_t> pending_ ABSL_GUARDED_BY(mu_);  // admission counts
  // Sync accumulator: key -> index in acc_keys_; acc_grads_ holds dim floats per key.
  absl::flat_hash_map<uint64_t, uint32_t> acc_index_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> acc_keys_ ABSL_GUARDED_BY(mu_);
  std::vector<float> acc_grads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(const TableDef& def) {
  if (def.name().empty()) return absl::InvalidArgumentError("table name is empty");
  if (def.name().size() > static_cast<size_t>(kMaxNameBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("table ", Quoted(def.name()), ": name of ",
                                                   def.name().size(), " bytes exceeds ",
                                                   kMaxNameBytes));
  }
  const TableOverhead overhead{static_cast<int64_t>(sizeof(Table)),
                               int64_t{kAdamCachedSteps} * int64_t{sizeof(BiasCorrection)}};
  absl::Status s = ValidateTableDef(def);
  absl::StatusOr<TableLayout> layout =
      s.ok() ? MakeTableLayout(def, overhead) : absl::StatusOr<TableLayout>(s);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", Quoted(def.name()), ": ", layout.status().message()));
  }
  return std::unique_ptr<EmbeddingTable>(new Table(def, *layout));
}

}  // namespace pstrain
