// Internal to src/ps: the task watermarks of one dense shard or one embedding table
// (docs/recovery.md). Per (epoch, task) of the chief's task queue, `next_batch`: the task's
// batches [0, next_batch) are applied (or were processed and dropped as stale). A tagged push of
// a lower batch is a duplicate (a task redone after a worker died, or after a restore of a cut
// taken in the middle of it): acknowledged, not applied. Not thread-safe: the owner guards it
// with the lock of its own updates, so a watermark and the update it stands for change together.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_format.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "ps.pb.h"

namespace pstrain {

class TaskWatermarks {
 public:
  using List = google::protobuf::RepeatedPtrField<TaskWatermark>;

  // InvalidArgument naming the field for a negative epoch, task or batch (or a batch of
  // INT64_MAX, whose next_batch would overflow); `what` starts the message ("push from
  // worker:1 (incarnation 7) to ps task 0").
  static absl::Status CheckTag(const PushTag& tag, absl::string_view what);
  // InvalidArgument naming the field and the entry for a negative epoch, task or next_batch, or
  // an (epoch, task) listed twice; `what` starts the message ("import of variable 'w'").
  static absl::Status CheckList(const List& list, absl::string_view what);

  // Whether a push of `tag` is a duplicate: its batch is below its task's next_batch, the
  // batches of the sync step being accumulated counting as applied.
  bool IsDuplicate(const PushTag& tag) const;
  // `tag`'s batch is processed: next_batch = max(next_batch, batch + 1).
  void Commit(const PushTag& tag);
  // sync: `tag`'s gradient joined the step being accumulated; CommitStep commits the tags of
  // the step once it is applied.
  void AddToStep(const PushTag& tag);
  void CommitStep();

  // Every watermark, sorted by (epoch, task), into `out` (its buffer reused).
  void Export(std::vector<TaskWatermarkRecord>* out) const;
  void ToProto(List* out) const;
  // Replaces every watermark (and a step's pending tags) by `list`, checked by CheckList.
  void Replace(const List& list);
  bool empty() const { return next_.empty(); }

 private:
  using Key = std::pair<int32_t, int64_t>;  // (epoch, task)
  // Sorted (epoch, task, next_batch).
  std::vector<std::pair<Key, int64_t>> Sorted() const;

  absl::flat_hash_map<Key, int64_t> next_;
  std::vector<PushTag> step_;  // sync: the tags of the step's accumulated gradients
};

}  // namespace pstrain
