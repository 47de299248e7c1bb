// The sparse pushes of the ParameterServer (its embedding tables' gradients): validation, the
// task watermark check, and the application at once (async, ssp) or into the table's sync step.
// Locks and their order: see parameter_server.cc.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/limits.h"
#include "ps/parameter_server_impl.h"

namespace pstrain {
namespace {

// `got` bytes of gradient rows, as a message shows them.
std::string FloatCount(size_t got) {
  if (got % sizeof(float) == 0) return absl::StrCat(got / sizeof(float));
  return absl::StrCat(got, " bytes");
}

}  // namespace

absl::Status ParameterServerImpl::ValidateGradient(const SparseGradient& g, bool one_per_step,
                                                   int task, uint64_t incarnation,
                                                   TableSlice* slice) {
  Table* table = slice->table.get();
  const int dim = table->rows->dim();
  const int64_t floats = slice->n * dim;  // at most kMaxKeysPerRequest * kMaxTableDim
  if (g.rows().size() != static_cast<size_t>(floats) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(TableWhere(g.table()), ": ", slice->n,
                                                   " keys need ", slice->n, " x ", dim,
                                                   " floats, got ", FloatCount(g.rows().size())));
  }
  slice->rows = InPlace(g.rows(), &slice->row_copy);
  if (int64_t bad = FirstNonFinite(slice->rows, floats); bad >= 0) {
    consistency_.counters.nonfinite_rejected++;
    return absl::InvalidArgumentError(absl::StrCat(
        TableWhere(g.table()), ": the gradient of key ", slice->keys[bad / dim],
        " has a non-finite value (", slice->rows[bad], ") at index ", bad % dim, " of its row"));
  }
  {
    absl::MutexLock lock(&table->mu);
    const uint64_t version = table->rows->version();
    if (g.read_version() > version) {
      return absl::InvalidArgumentError(
          absl::StrCat(TableWhere(g.table()), ": the gradient was computed from version ",
                       g.read_version(), " but the table is at version ", version));
    }
    if (one_per_step && g.read_version() == version) {
      for (const auto& c : table->contributors) {
        if (c == std::make_pair(task, incarnation)) {
          return absl::InvalidArgumentError(absl::StrCat(TableWhere(g.table()), ": worker:", task,
                                                         " already pushed a gradient for step ",
                                                         version));
        }
      }
    }
  }
  if (absl::Status s = table->rows->CheckPush(slice->keys, slice->n); !s.ok()) {
    return FromTable(g.table(), s);
  }
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::PushSparse(const PushSparseRequest& req,
                                             PushSparseResponse* resp) {
  resp->Clear();
  if (absl::Status s = CheckPushRequest(
          req, [](const SparseGradient& g) -> const std::string& { return g.table(); },
          "sparse push", "table", kMaxTables);
      !s.ok()) {
    return s;
  }
  const PushContext ctx = ContextOf(req);

  // Validate everything first. What is checked cannot become invalid before the apply below:
  // dims are fixed, the rows belong to the request, versions only grow, and a key CheckPush
  // accepted keeps its row (a table that may drop rows accepts any key).
  const int n = req.gradients_size();
  std::vector<TableSlice> slices(n);
  for (int i = 0; i < n; ++i) {
    const SparseGradient& g = req.gradients(i);
    if (absl::Status s = ParseKeys(g.table(), g.keys(), "push", &slices[i]); !s.ok()) return s;
    if (absl::Status s =
            ValidateGradient(g, OnePerStep(ctx), ctx.task, ctx.incarnation, &slices[i]);
        !s.ok()) {
      return s;
    }
    // Async and ssp apply at once: an update that would make a row non-finite refuses the push
    // before anything is applied (sync checks each step's average when it applies it).
    if (ctx.mode != Mode::kSync) {
      const TableSlice& slice = slices[i];
      if (absl::Status s = slice.table->rows->CheckUpdate(slice.keys, slice.n, slice.rows);
          !s.ok()) {
        consistency_.counters.nonfinite_rejected++;
        return s;
      }
    }
  }

  consistency_.Rejoin(req.sender());  // a worker paused at a barrier counts again
  ApplyResult any;
  for (int i = 0; i < n; ++i) {
    ApplyResult r;
    absl::StatusOr<uint64_t> version =
        ApplySparse(slices[i], req.gradients(i).read_version(), ctx, &r);
    if (!version.ok()) {
      // A concurrent push changed the rows since the check above: this table's update is refused
      // whole, but the tables before it in this request are applied (docs/semantics.md).
      consistency_.counters.nonfinite_rejected++;
      CountPush(req.sender(), any);
      return version.status();
    }
    resp->add_versions(*version);
    if (r.dropped) resp->set_stale_dropped(resp->stale_dropped() + 1);
    any.Add(r);
  }
  CountPush(req.sender(), any);
  return absl::OkStatus();
}

// As ApplyOne, under Table::mu; an untagged async gradient takes only the table's own lock (as
// it always did), a tagged one also Table::mu, so its watermark and its rows change together.
absl::StatusOr<uint64_t> ParameterServerImpl::ApplySparse(const TableSlice& slice,
                                                          uint64_t read_version,
                                                          const PushContext& ctx,
                                                          ApplyResult* result) {
  Table* table = slice.table.get();
  auto apply = [&]() -> absl::StatusOr<uint64_t> {
    absl::StatusOr<uint64_t> version = table->rows->Apply(slice.keys, slice.n, slice.rows);
    if (!version.ok()) return version;
    table->Publish(*version);
    consistency_.counters.pushes_applied++;
    consistency_.counters.updates_applied++;
    result->updated = true;
    return version;
  };
  if (ctx.mode != Mode::kSync && ctx.tag == nullptr) return apply();
  absl::MutexLock lock(&table->mu);
  const bool duplicate = ctx.tag != nullptr && table->applied.IsDuplicate(*ctx.tag);
  if (ctx.mode != Mode::kSync) {
    if (duplicate) {
      result->duplicate = true;
      return table->rows->version();
    }
    absl::StatusOr<uint64_t> version = apply();
    if (version.ok()) table->applied.Commit(*ctx.tag);
    return version;
  }
  const auto sender = std::make_pair(ctx.task, ctx.incarnation);
  if (read_version < table->rows->version() ||
      std::find(table->contributors.begin(), table->contributors.end(), sender) !=
          table->contributors.end()) {
    if (duplicate) {
      result->duplicate = true;
    } else {
      result->dropped = true;
      if (ctx.tag != nullptr) table->applied.Commit(*ctx.tag);
    }
    return table->rows->version();
  }
  table->contributors.push_back(sender);
  if (duplicate) {
    result->duplicate = true;  // counts towards the step, adds nothing to it
  } else {
    table->rows->Accumulate(slice.keys, slice.n, slice.rows);
    ++table->added;
    if (ctx.tag != nullptr) table->applied.AddToStep(*ctx.tag);
    consistency_.counters.pushes_applied++;
  }
  result->updated = MaybeApplyTableStep(table);
  return table->rows->version();
}

bool ParameterServerImpl::MaybeApplyTableStep(Table* table) {
  const size_t have = table->contributors.size();
  if (have == 0 || have < static_cast<size_t>(consistency_.StepThreshold(table->contributors))) {
    return false;
  }
  // The average of the gradients added; a step of duplicates only (an empty accumulator) still
  // advances the table's version.
  bool refused = false;
  table->Publish(table->rows->ApplyAccumulated(std::max(table->added, 1), &refused));
  if (refused) {
    consistency_.counters.nonfinite_rejected++;
  } else if (table->added > 0) {
    consistency_.counters.updates_applied++;
  }
  table->contributors.clear();
  table->added = 0;
  table->applied.CommitStep();
  return true;
}

void ParameterServerImpl::ApplyCompleteTableSteps() {
  for (const auto& [name, table] : AllTables()) {
    absl::MutexLock lock(&table->mu);
    MaybeApplyTableStep(table.get());
  }
}

}  // namespace pstrain
