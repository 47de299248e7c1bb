// The data path of the ParameterServer: pulls (with their sync and ssp waits), pushes, and the
// application of sync steps. Locks and their order: see parameter_server.cc.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/half.h"
#include "common/limits.h"
#include "common/tensor.h"
#include "common/tensor_codec.h"
#include "ps/parameter_server_impl.h"
#include "spdlog/spdlog.h"
#include "transport/buffer_pool.h"

namespace pstrain {

// The first pass has no early exit so it vectorises; the second runs only for a bad tensor.
int64_t FirstNonFinite(const float* p, int64_t n) {
  constexpr float kMax = std::numeric_limits<float>::max();
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= !(std::fabs(p[i]) <= kMax);  // NaN compares false
  if (!bad) return -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) return i;
  }
  return -1;
}

absl::StatusOr<int64_t> ParameterServerImpl::VariableBytes(const std::string& name) {
  absl::StatusOr<VariablePtr> var = Find(name);
  if (!var.ok()) return var.status();
  return (*var)->bytes;
}

absl::Status ParameterServerImpl::ValidatePull(const PullRequest& req,
                                               std::vector<VariablePtr>* vars, int64_t max_bytes) {
  if (absl::Status s = CheckSender(req.has_sender(), req.sender()); !s.ok()) return s;
  if (absl::Status s = CheckGeneration(req.sender(), "pull"); !s.ok()) return s;
  if (absl::Status s = CheckChiefOrWorker(req.sender(), "pull"); !s.ok()) return s;
  if (req.clock() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull with clock ", req.clock(), ": a clock counts pushes, from 0"));
  }
  if (absl::Status s = CheckNames(
          req.names(), [](const std::string& n) -> const std::string& { return n; }, "pull",
          absl::StatusCode::kInvalidArgument);
      !s.ok()) {
    return s;
  }
  vars->reserve(req.names_size());
  int64_t total = 0;
  for (const std::string& name : req.names()) {
    absl::StatusOr<VariablePtr> var = Find(name);
    if (!var.ok()) return var.status();
    // At most kMaxVariablesPerRequest * kMaxTensorBytes: cannot overflow, checked all the same.
    total = CheckedAdd(total, (*var)->bytes).value_or(std::numeric_limits<int64_t>::max());
    vars->push_back(*std::move(var));
  }
  if (total > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pull of ", req.names_size(), " variables from ", Where(), " would return ",
                     total, " bytes, over the limit of ", max_bytes,
                     " bytes per response; the client must split the pull"));
  }
  return absl::OkStatus();
}

// Every variable at min_version or later, and all at the same step, so the worker's gradients are
// for one step. (They differ only while the last pushes of a step are still being applied.) A
// removed variable ends the wait: the pull is then answered NotFound.
bool ParameterServerImpl::SyncReady(const std::vector<VariablePtr>& vars, uint64_t min_version) {
  std::optional<uint64_t> step;
  for (const VariablePtr& v : vars) {
    absl::ReaderMutexLock lock(&v->mu);
    if (v->deleted) return true;
    if (v->version < min_version || (step && *step != v->version)) return false;
    step = v->version;
  }
  return true;
}

std::string ParameterServerImpl::SyncWaitReason(const std::vector<VariablePtr>& vars,
                                                const std::vector<std::string>& names,
                                                uint64_t min_version) {
  for (size_t i = 0; i < vars.size(); ++i) {
    absl::ReaderMutexLock lock(&vars[i]->mu);
    const uint64_t at = vars[i]->version;
    if (at >= min_version) continue;
    const Contributors& have = vars[i]->contributors;
    return absl::StrCat("step ", min_version, ": variable ", Quoted(names[i]), " is at step ", at,
                        " on ", Where(), "; step ", at + 1, " still lacks gradients from ",
                        consistency_.Lacking(have), " (it has ", have.size(), " of ",
                        consistency_.StepThreshold(have), ")");
  }
  return absl::StrCat("step ", min_version, ": the variables on ", Where(),
                      " to reach the same step");
}

void ParameterServerImpl::PullAsync(const PullRequest& req, PullResponse* resp,
                                    DataHandler::PullSink sink, int64_t max_bytes,
                                    std::function<void(absl::Status)> done) {
  resp->Clear();
  auto vars = std::make_shared<std::vector<VariablePtr>>();
  if (absl::Status s = ValidatePull(req, vars.get(), max_bytes); !s.ok()) return done(s);
  const Mode mode = consistency_.mode();
  const uint64_t min_version = req.min_version();
  const int64_t clock = req.clock();
  const Sender sender = req.sender();
  auto names =
      std::make_shared<const std::vector<std::string>>(req.names().begin(), req.names().end());
  Consistency::Wait wait;
  // ready and describe are called under the consistency lock and take variable locks after it.
  wait.ready = [this, vars, mode, min_version, clock]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (mode == Mode::kSsp) return consistency_.ClockAllows(clock);
    return mode != Mode::kSync || SyncReady(*vars, min_version);
  };
  wait.describe = [this, vars, names, mode, min_version, clock, sender]()
                      ABSL_NO_THREAD_SAFETY_ANALYSIS -> std::string {
    if (mode == Mode::kSsp) return consistency_.ClockWaitReason(sender, clock);
    return SyncWaitReason(*vars, *names, min_version);
  };
  wait.serve = [this, vars, names, resp, sink = std::move(sink),
                done = std::move(done)](absl::Status s) {
    if (!s.ok()) return done(s);
    try {
      for (size_t i = 0; i < vars->size(); ++i) {
        Variable* var = (*vars)[i].get();
        absl::ReaderMutexLock lock(&var->mu);
        if (var->deleted) {
          resp->Clear();
          return done(absl::NotFoundError(absl::StrCat("variable ", Quoted((*names)[i]),
                                                       " was deleted from ", Where(),
                                                       " while the pull waited")));
        }
        VariableValue* out = resp->add_values();
        out->set_name((*names)[i]);
        out->set_version(var->version);
        if (!sink) {
          EncodeTensor(var->shape, var->values->data(), out->mutable_value());
          continue;
        }
        TensorProto* value = out->mutable_value();
        value->set_dtype(DT_FLOAT);
        value->mutable_shape()->Assign(var->shape.begin(), var->shape.end());
        // The sink may keep the values instead of copying them: a push meanwhile updates a copy.
        if (absl::Status sunk = sink(static_cast<int>(i), var->values->data(),
                                     static_cast<int64_t>(var->values->size()), var->values);
            !sunk.ok()) {
          resp->Clear();
          return done(sunk);
        }
      }
    } catch (const std::bad_alloc&) {
      resp->Clear();
      return done(absl::ResourceExhaustedError(
          absl::StrCat("not enough memory on ", Where(), " to answer a pull")));
    }
    done(absl::OkStatus());
  };
  consistency_.PullOrWait(sender, clock, std::move(wait));
}

absl::Status ParameterServerImpl::Push(const PushRequest& req,
                                       absl::Span<const ConstBytes> out_of_line,
                                       PushResponse* resp) {
  // One piece per gradient: its out-of-line bytes, or its data in the message.
  std::vector<ConstBytes> in_message;
  if (out_of_line.empty()) {
    in_message.reserve(req.gradients_size());
    for (const Gradient& g : req.gradients()) {
      const std::string& data = g.gradient().data();
      in_message.push_back({data.data(), static_cast<int64_t>(data.size())});
    }
  }
  const absl::Span<const ConstBytes> bytes = out_of_line.empty() ? in_message : out_of_line;
  std::vector<absl::Span<const ConstBytes>> pieces;
  pieces.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) pieces.push_back(bytes.subspan(i, 1));
  if (out_of_line.empty()) return PushGradients(req, pieces, resp);
  return PushPieces(req, pieces, resp);
}

absl::Status ParameterServerImpl::PushPieces(
    const PushRequest& req, absl::Span<const absl::Span<const ConstBytes>> out_of_line,
    PushResponse* resp) {
  resp->Clear();
  if (out_of_line.size() != static_cast<size_t>(req.gradients_size())) {
    return absl::InvalidArgumentError(absl::StrCat("push of ", req.gradients_size(),
                                                   " gradients with the data of ",
                                                   out_of_line.size(), " out of line"));
  }
  return PushGradients(req, out_of_line, resp, /*out_of_line=*/true);
}

absl::Status ParameterServerImpl::PushGradients(
    const PushRequest& req, absl::Span<const absl::Span<const ConstBytes>> pieces,
    PushResponse* resp, bool out_of_line) {
  resp->Clear();
  if (absl::Status s = CheckPushRequest(
          req, [](const Gradient& g) -> const std::string& { return g.name(); }, "push", "variable",
          kMaxVariablesPerRequest);
      !s.ok()) {
    return s;
  }
  const PushContext ctx = ContextOf(req);
  const int task = ctx.task;
  const uint64_t incarnation = ctx.incarnation;

  // Validate everything first, the whole of every gradient scanned for non-finite values before
  // anything is applied. What is checked cannot become invalid before the apply below: shapes
  // are fixed, the gradient belongs to the request, and versions only grow.
  const int n = req.gradients_size();
  std::vector<VariablePtr> vars(n);
  std::vector<GradientChunks> grads(n);
  for (int i = 0; i < n; ++i) {
    const Gradient& g = req.gradients(i);
    std::string what = absl::StrCat("gradient for variable ", Quoted(g.name()));
    absl::StatusOr<VariablePtr> var = Find(g.name());
    if (!var.ok()) return var.status();
    const TensorProto& t = g.gradient();
    int64_t size = 0;
    for (const ConstBytes& piece : pieces[i]) size += piece.size;
    const void* first = !out_of_line        ? t.data().data()
                        : pieces[i].empty() ? nullptr
                                            : pieces[i][0].data;
    absl::StatusOr<GradientBytes> bytes = GradientData(t, first, size, (*var)->shape, what);
    if (!bytes.ok()) return bytes.status();
    if (bytes->dtype != DT_FLOAT) absl::StrAppend(&what, " (", DataType_Name(bytes->dtype), ")");
    const GradientChunks chunks(bytes->dtype, pieces[i], bytes->elements);
    int64_t bad = -1;
    float bad_value = 0;
    chunks.ForEach([&](int64_t begin, const float* v, int64_t count) {
      if (bad >= 0) return;
      if (const int64_t at = FirstNonFinite(v, count); at >= 0) {
        bad = begin + at;
        bad_value = v[at];
      }
    });
    if (bad >= 0) {
      consistency_.counters.nonfinite_rejected++;
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a non-finite value (", bad_value, ") at index ", bad));
    }
    {
      absl::ReaderMutexLock lock(&(*var)->mu);
      const uint64_t version = (*var)->version;
      if (g.read_version() > version) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " was computed from version ", g.read_version(),
                         " but the variable is at version ", version, " on ", Where()));
      }
      if (OnePerStep(ctx) && g.read_version() == version) {
        for (const auto& c : (*var)->contributors) {
          if (c == std::make_pair(task, incarnation)) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": worker:", task, " already pushed a gradient for step ", version));
          }
        }
      }
    }
    vars[i] = *std::move(var);
    grads[i] = chunks;
  }

  ApplyResult any;
  if (ctx.mode != Mode::kSync) {
    if (absl::Status s = ApplyAtOnce(req, vars, grads, ctx, resp, &any); !s.ok()) return s;
    consistency_.Rejoin(req.sender());  // a worker paused at a barrier counts again
    CountPush(req.sender(), any);
    return absl::OkStatus();
  }
  consistency_.Rejoin(req.sender());  // before the push counts towards its steps
  for (int i = 0; i < n; ++i) {
    ApplyResult r;
    resp->add_versions(ApplyOne(vars[i].get(), req.gradients(i), grads[i], ctx, &r));
    if (r.dropped) resp->set_stale_dropped(resp->stale_dropped() + 1);
    any.Add(r);
  }
  CountPush(req.sender(), any);
  return absl::OkStatus();
}

// Async and ssp apply a push at once, so the whole push is checked before any of it is written:
// an update that would make a weight or an optimizer slot non-finite (finite gradients can
// overflow them, e.g. two steps of 3.4e38 with lr 1) refuses the push as a non-finite gradient
// does. Every variable of the request stays locked from its check to its update, so no other push
// changes what was checked. Locks are taken in address order (names are distinct, so variables
// are): the only place holding more than one variable's lock, it cannot deadlock with itself, and
// every other holder takes one at a time.
absl::Status ParameterServerImpl::ApplyAtOnce(const PushRequest& req,
                                              absl::Span<const VariablePtr> vars,
                                              absl::Span<const GradientChunks> grads,
                                              const PushContext& ctx, PushResponse* resp,
                                              ApplyResult* any) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<absl::Mutex*> locks;
  locks.reserve(vars.size());
  for (const VariablePtr& var : vars) locks.push_back(&var->mu);
  std::sort(locks.begin(), locks.end());
  for (absl::Mutex* mu : locks) mu->Lock();
  absl::Cleanup unlock = [&locks] {
    for (auto it = locks.rbegin(); it != locks.rend(); ++it) (*it)->Unlock();
  };
  for (size_t i = 0; i < vars.size(); ++i) {
    Variable* var = vars[i].get();
    if (ctx.tag != nullptr && var->applied.IsDuplicate(*ctx.tag)) continue;  // not applied
    const GradientChunks& grad = grads[i];
    const int64_t at = var->optimizer->FirstNonFiniteUpdate(
        var->values->data(), [&grad](Optimizer::ChunkSink fn) { grad.ForEach(fn); },
        static_cast<int64_t>(var->values->size()), static_cast<int64_t>(var->version));
    if (at >= 0) {
      consistency_.counters.nonfinite_rejected++;
      return absl::InvalidArgumentError(
          absl::StrCat("gradient for variable ", Quoted(req.gradients(i).name()), " would make ",
                       std::string(var->optimizer->name()), "'s update of element ", at,
                       " (its value or an optimizer slot) non-finite at version ", var->version,
                       " on ", Where(), "; nothing of the push was applied"));
    }
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    ApplyResult r;
    resp->add_versions(ApplyLocked(vars[i].get(), req.gradients(i), grads[i], ctx, &r));
    any->Add(r);
  }
  return absl::OkStatus();
}

void ParameterServerImpl::CountPush(const Sender& sender, const ApplyResult& any) {
  if (any.dropped) consistency_.counters.stale_dropped++;
  if (any.duplicate) consistency_.counters.duplicates_dropped++;
  consistency_.CountPush(consistency_.WorkerSlot(sender), any.dropped);
  if (any.updated) consistency_.Notify();
}

// The watermark is checked and committed under the variable's lock, with the update it stands
// for: a checkpoint's copy (which takes the same lock) sees both or neither.
uint64_t ParameterServerImpl::ApplyOne(Variable* var, const Gradient& g, const GradientChunks& grad,
                                       const PushContext& ctx, ApplyResult* result) {
  absl::MutexLock lock(&var->mu);
  return ApplyLocked(var, g, grad, ctx, result);
}

uint64_t ParameterServerImpl::ApplyLocked(Variable* var, const Gradient& g,
                                          const GradientChunks& grad, const PushContext& ctx,
                                          ApplyResult* result) {
  const int64_t n = static_cast<int64_t>(var->values->size());
  const bool duplicate = ctx.tag != nullptr && var->applied.IsDuplicate(*ctx.tag);
  if (ctx.mode != Mode::kSync) {
    if (duplicate) {
      result->duplicate = true;
      return var->version;
    }
    var->optimizer->ApplyChunks(
        var->MutableValues(), [&grad](Optimizer::ChunkSink fn) { grad.ForEach(fn); }, n,
        static_cast<int64_t>(var->version));
    ++var->version;
    if (ctx.tag != nullptr) var->applied.Commit(*ctx.tag);
    consistency_.counters.pushes_applied++;
    consistency_.counters.updates_applied++;
    result->updated = true;
    return var->version;
  }
  // A gradient computed for a step that is already applied, or a twin of this push sent at the
  // same time and accumulated since Push checked (one worker's gradient counts once per step), is
  // dropped; it was processed, so its watermark commits now.
  const auto sender = std::make_pair(ctx.task, ctx.incarnation);
  if (g.read_version() < var->version ||
      std::find(var->contributors.begin(), var->contributors.end(), sender) !=
          var->contributors.end()) {
    if (duplicate) {
      result->duplicate = true;
    } else {
      result->dropped = true;
      if (ctx.tag != nullptr) var->applied.Commit(*ctx.tag);
    }
    return var->version;
  }
  var->contributors.push_back(sender);
  if (duplicate) {
    result->duplicate = true;  // counts towards the step, adds nothing to it
  } else {
    if (var->accum.empty()) var->accum.assign(n, 0.0f);
    float* acc = var->accum.data();
    grad.ForEach([acc](int64_t begin, const float* v, int64_t count) {
      for (int64_t j = 0; j < count; ++j) acc[begin + j] += v[j];
    });
    ++var->added;
    if (ctx.tag != nullptr) var->applied.AddToStep(*ctx.tag);
    consistency_.counters.pushes_applied++;
  }
  result->updated = MaybeApplyStep(var);
  return var->version;
}

bool ParameterServerImpl::MaybeApplyStep(Variable* var) {
  const size_t have = var->contributors.size();
  if (have == 0 || have < static_cast<size_t>(consistency_.StepThreshold(var->contributors))) {
    return false;
  }
  // The average of the gradients added; a step of duplicates only advances without an update.
  if (var->added > 0) {
    const int64_t n = static_cast<int64_t>(var->values->size());
    float* acc = var->accum.data();
    const float scale = 1.0f / static_cast<float>(var->added);
    for (int64_t j = 0; j < n; ++j) acc[j] *= scale;
    // The step's pushes were accepted one by one; an average whose update would make a value
    // or a slot non-finite (an overflowing sum included) is not applied: the step advances
    // without an update, and is counted as refused.
    const int64_t at = var->optimizer->FirstNonFiniteUpdate(
        var->values->data(), [acc, n](Optimizer::ChunkSink fn) { fn(0, acc, n); }, n,
        static_cast<int64_t>(var->version));
    if (at < 0) {
      var->optimizer->Apply(var->MutableValues(), acc, n, static_cast<int64_t>(var->version));
      consistency_.counters.updates_applied++;
    } else {
      consistency_.counters.nonfinite_rejected++;
      spdlog::warn(
          "step {} of a variable on {}: the average of {} gradients would make element "
          "{} non-finite; the step is not applied",
          var->version, Where(), var->added, at);
    }
    std::fill(var->accum.begin(), var->accum.end(), 0.0f);
  }
  ++var->version;
  var->contributors.clear();
  var->added = 0;
  var->applied.CommitStep();
  return true;
}

void ParameterServerImpl::ApplyCompleteSteps() {
  std::vector<VariablePtr> all;
  {
    absl::ReaderMutexLock lock(&mu_);
    all.reserve(vars_.size());
    for (const auto& [name, var] : vars_) all.push_back(var);
  }
  for (const VariablePtr& var : all) {
    absl::MutexLock lock(&var->mu);
    MaybeApplyStep(var.get());
  }
}

}  // namespace pstrain
