// PsClient's pushes: the gradients of every variable, or of some, encoded per batch and sent to
// the PS that hold them.
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "client/ps_client_fan_out.h"
#include "common/half.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"

namespace pstrain {

using ps_client_internal::RowSize;

absl::StatusOr<std::vector<TensorView>> ViewsOf(const std::vector<Tensor>& tensors) {
  std::vector<TensorView> views;
  views.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.size() != NumElements(t.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", i, " has shape ", ShapeString(t.shape), " and ", t.size(), " values"));
    }
    views.push_back({t.shape, t.data()});
  }
  return views;
}

absl::Status PsClient::Push(const std::vector<Tensor>& grads, int* stale_dropped,
                            const PushTag* tag) {
  absl::StatusOr<std::vector<TensorView>> views = ViewsOf(grads);
  if (!views.ok()) return views.status();
  return Push(*views, stale_dropped, tag);
}

absl::Status PsClient::Push(const std::vector<TensorView>& grads, int* stale_dropped,
                            const PushTag* tag) {
  return PushSelected(grads, std::vector<bool>(variables_.size(), true), stale_dropped, tag);
}

absl::Status PsClient::PushSome(const std::vector<int>& vars, const std::vector<Tensor>& grads,
                                int* stale_dropped, const PushTag* tag) {
  if (grads.size() != variables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", grads.size(), " gradients for ", variables_.size(), " variables"));
  }
  std::vector<bool> selected(variables_.size(), false);
  std::vector<TensorView> views(variables_.size());
  for (int i : vars) {
    if (i < 0 || i >= static_cast<int>(variables_.size()) || selected[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("push of variable ", i, " of ", variables_.size(), ", or of it twice"));
    }
    selected[i] = true;
    const Tensor& t = grads[i];
    if (t.size() != NumElements(t.shape)) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for ", variables_[i].name,
                                                     " has shape ", ShapeString(t.shape), " and ",
                                                     t.size(), " values"));
    }
    views[i] = {t.shape, t.data()};
  }
  return PushSelected(views, selected, stale_dropped, tag);
}

absl::Status PsClient::PushSelected(const std::vector<TensorView>& grads,
                                    const std::vector<bool>& selected, int* stale_dropped,
                                    const PushTag* tag) {
  if (!unsendable_.ok()) return unsendable_;
  if (grads.size() != variables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", grads.size(), " gradients for ", variables_.size(), " variables"));
  }
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (!selected[i]) continue;
    if (grads[i].shape != variables_[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient for ", variables_[i].name, " has shape ", ShapeString(grads[i].shape),
          ", the variable ", ShapeString(variables_[i].shape)));
    }
    if (grads[i].data == nullptr && NumElements(grads[i].shape) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient for ", variables_[i].name, " has no values"));
    }
  }
  const int elem = DtypeBytes(push_dtype_);
  if (push_dtype_ != DT_FLOAT && push_dtype_ != DT_HALF && push_dtype_ != DT_BFLOAT16) {
    return absl::InvalidArgumentError(absl::StrCat("push dtype ", DataType_Name(push_dtype_),
                                                   ": DT_FLOAT, DT_HALF or DT_BFLOAT16"));
  }
  // The bytes each variable's gradient travels from: the caller's floats, or 16-bit copies.
  std::vector<const char*> base(variables_.size());
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (!selected[i]) continue;
    base[i] = reinterpret_cast<const char*>(grads[i].data);
    if (push_dtype_ == DT_FLOAT) continue;
    const int64_t n = NumElements(variables_[i].shape);
    narrow_[i].resize(n);
    if (push_dtype_ == DT_HALF) {
      FloatToHalf(grads[i].data, narrow_[i].data(), n);
    } else {
      FloatToBfloat16(grads[i].data, narrow_[i].data(), n);
    }
    base[i] = reinterpret_cast<const char*>(narrow_[i].data());
  }
  // The batches with a selected shard; one with only some of them sends a copy of its request
  // with those (some_reqs_), whole.
  std::vector<size_t> which;
  std::vector<bool> part(batches_.size(), false);
  for (size_t b = 0; b < batches_.size(); ++b) {
    if (tag != nullptr) {
      *push_reqs_[b].mutable_tag() = *tag;
    } else {
      push_reqs_[b].clear_tag();
    }
    const std::vector<Slot>& slots = batches_[b].slots;
    size_t chosen = 0;
    for (size_t k = 0; k < slots.size(); ++k) {
      const auto [i, j] = slots[k];
      if (!selected[i]) continue;
      ++chosen;
      const VariableRef& v = variables_[i];
      const ShardRef& shard = v.shards[j];
      Gradient* g = push_reqs_[b].mutable_gradients(k);
      g->set_read_version(versions_[i][j]);
      g->mutable_gradient()->set_dtype(push_dtype_);
      const int64_t row_bytes = RowSize(v.shape) * elem;
      push_src_[b][k] = {base[i] + shard.row_begin * row_bytes,
                         (shard.row_end - shard.row_begin) * row_bytes};
    }
    if (chosen == 0) continue;
    which.push_back(b);
    if (chosen == slots.size()) continue;
    part[b] = true;
    PushRequest& r = some_reqs_[b];
    r.Clear();
    *r.mutable_sender() = push_reqs_[b].sender();
    if (tag != nullptr) *r.mutable_tag() = *tag;
    some_src_[b].clear();
    for (size_t k = 0; k < slots.size(); ++k) {
      if (!selected[slots[k].var]) continue;
      *r.add_gradients() = push_reqs_[b].gradients(k);
      some_src_[b].push_back(push_src_[b][k]);
    }
  }
  absl::Status s =
      FanOut("Push", /*retry=*/tag != nullptr, which,
             [this, &part](DataChannel* c, const CallOptions& o, size_t b, DoneFn done) {
               if (part[b]) {
                 c->Push(o, some_reqs_[b], some_src_[b], &push_resps_[b], std::move(done));
               } else {
                 c->Push(o, push_reqs_[b], push_src_[b], &push_resps_[b], std::move(done));
               }
             });
  if (s.ok() && stale_dropped != nullptr) {
    *stale_dropped = 0;
    for (size_t b : which) *stale_dropped += push_resps_[b].stale_dropped();
  }
  return s;
}

}  // namespace pstrain
