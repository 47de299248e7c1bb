// Internal to src/worker: a worker's shard of the training data, read once and kept while later
// runs (a rollback's, a restarted chief's) train on the same records.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/examples.h"
#include "worker.pb.h"

namespace pstrain {

// Thread-safe; a read holds the cache, so a second caller waits for it rather than reading too.
class ShardCache {
 public:
  // The shard of `spec` (ReadShard): the one kept if the spec names the same data, records,
  // shard, bad-line handling, schema, statistics and columns as the last read, else read now
  // (and kept if it was read).
  absl::StatusOr<std::shared_ptr<const Examples>> Get(const TrainingSpec& spec);

 private:
  absl::Mutex mu_;
  std::string key_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Examples> data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain
