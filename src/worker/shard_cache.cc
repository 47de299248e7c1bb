#include "worker/shard_cache.h"

#include "absl/strings/str_cat.h"
#include "worker/trainer.h"

namespace pstrain {

absl::StatusOr<std::shared_ptr<const Examples>> ShardCache::Get(const TrainingSpec& spec) {
  // Everything ReadShard reads the shard by: a table's schema, statistics and columns too.
  const std::string key = absl::StrCat(
      spec.data(), "\n", spec.train_records(), "/", spec.shard_index(), "/", spec.num_shards(), "/",
      spec.skip_bad_lines(), "/", spec.has_libsvm_features() ? spec.libsvm_features() : -1, "/",
      spec.libsvm_first_index(), "\n", spec.schema(), "\n", spec.feature_stats());
  absl::MutexLock lock(&mu_);
  if (data_ != nullptr && key_ == key) return data_;
  data_.reset();
  absl::StatusOr<Examples> data = ReadShard(spec);
  if (!data.ok()) return data.status();
  data_ = std::make_shared<const Examples>(*std::move(data));
  key_ = key;
  return data_;
}

}  // namespace pstrain
