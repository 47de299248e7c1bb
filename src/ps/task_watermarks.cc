#include "ps/task_watermarks.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

absl::Status TaskWatermarks::CheckTag(const PushTag& tag, absl::string_view what) {
  auto bad = [&](absl::string_view field, int64_t value) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tag.", field, " ", value,
                                                   " is negative (epochs, tasks and batches "
                                                   "count from 0)"));
  };
  if (tag.epoch() < 0) return bad("epoch", tag.epoch());
  if (tag.task() < 0) return bad("task", tag.task());
  if (tag.batch() < 0) return bad("batch", tag.batch());
  if (tag.batch() == std::numeric_limits<int64_t>::max()) {  // next_batch would overflow
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": tag.batch ", tag.batch(), " is out of range"));
  }
  return absl::OkStatus();
}

absl::Status TaskWatermarks::CheckList(const List& list, absl::string_view what) {
  absl::flat_hash_set<Key> seen;
  for (int i = 0; i < list.size(); ++i) {
    const TaskWatermark& w = list[i];
    auto bad = [&](auto... why) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": applied[", i, "] (epoch ", w.epoch(),
                                                     ", task ", w.task(), ", next_batch ",
                                                     w.next_batch(), ") ", why...));
    };
    if (w.epoch() < 0) return bad("has a negative epoch");
    if (w.task() < 0) return bad("has a negative task");
    if (w.next_batch() < 0) return bad("has a negative next_batch");
    if (!seen.insert({w.epoch(), w.task()}).second) return bad("repeats its epoch and task");
  }
  return absl::OkStatus();
}

bool TaskWatermarks::IsDuplicate(const PushTag& tag) const {
  auto it = next_.find(Key{tag.epoch(), tag.task()});
  if (it != next_.end() && tag.batch() < it->second) return true;
  return std::any_of(step_.begin(), step_.end(), [&](const PushTag& t) {
    return t.epoch() == tag.epoch() && t.task() == tag.task() && tag.batch() <= t.batch();
  });
}

void TaskWatermarks::Commit(const PushTag& tag) {
  int64_t& next = next_[Key{tag.epoch(), tag.task()}];
  next = std::max(next, tag.batch() + 1);
}

void TaskWatermarks::AddToStep(const PushTag& tag) { step_.push_back(tag); }

void TaskWatermarks::CommitStep() {
  for (const PushTag& t : step_) Commit(t);
  step_.clear();
}

std::vector<std::pair<TaskWatermarks::Key, int64_t>> TaskWatermarks::Sorted() const {
  std::vector<std::pair<Key, int64_t>> all(next_.begin(), next_.end());
  std::sort(all.begin(), all.end());
  return all;
}

void TaskWatermarks::Export(std::vector<TaskWatermarkRecord>* out) const {
  out->clear();
  for (const auto& [key, next] : Sorted()) out->push_back({key.first, key.second, next});
}

void TaskWatermarks::ToProto(List* out) const {
  out->Clear();
  for (const auto& [key, next] : Sorted()) {
    TaskWatermark* w = out->Add();
    w->set_epoch(key.first);
    w->set_task(key.second);
    w->set_next_batch(next);
  }
}

void TaskWatermarks::Replace(const List& list) {
  next_.clear();
  step_.clear();
  for (const TaskWatermark& w : list) next_[Key{w.epoch(), w.task()}] = w.next_batch();
}

}  // namespace pstrain
