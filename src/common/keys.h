// Where an embedding key lives and how its first row is seeded: fixed functions of the key, the
// same in every process and on every platform (unlike absl::Hash, which is seeded per process).
#pragma once

#include <cstdint>

namespace pstrain {

// MurmurHash3's 64-bit finaliser: a bijection that spreads nearby keys over all 64 bits.
constexpr uint64_t MixKey(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// The PS task that holds `key` among `num_ps` (> 0): by a hash of the key, not by creation order,
// so hashed feature ids spread evenly whatever their distribution.
inline int PsOfKey(uint64_t key, int num_ps) {
  const unsigned __int128 wide =
      static_cast<unsigned __int128>(MixKey(key ^ 0x9e3779b97f4a7c15ULL)) * num_ps;
  return static_cast<int>(wide >> 64);
}

// The seed of the random stream that draws the first row of `key` in a table seeded `seed`.
constexpr uint64_t RowSeed(uint64_t seed, uint64_t key) { return MixKey(MixKey(seed) + key); }

// The seed of the order of a client program's task (TaskAssignment.seed): the job's --seed, the
// epoch and the task mixed.
constexpr uint64_t TaskSeed(uint64_t job_seed, int epoch, int64_t task) {
  return MixKey(MixKey(MixKey(job_seed) ^ static_cast<uint64_t>(epoch)) ^
                static_cast<uint64_t>(task));
}

}  // namespace pstrain
