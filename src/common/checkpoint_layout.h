// The byte layout the checkpoint part writer (checkpoint_format.cc) and reader
// (checkpoint_read.cc) share; common/checkpoint_format.h describes it. Internal to common.
#ifndef PSTRAIN_COMMON_CHECKPOINT_LAYOUT_H_
#define PSTRAIN_COMMON_CHECKPOINT_LAYOUT_H_

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace pstrain::checkpoint_layout {

constexpr char kMagic[8] = {'P', 'S', 'T', 'C', 'K', 'P', 'T', '\n'};
constexpr char kTrailerMagic[8] = {'P', 'S', 'T', 'C', 'K', 'E', 'N', 'D'};
constexpr int64_t kHeaderBytes = 8 + 4 + 4 + 4 + 8;
constexpr int64_t kTrailerBytes = 8 + 8 + 8;
constexpr uint8_t kShardRecord = 1;
constexpr uint8_t kTableRecord = 2;
// Format 2 adds a watermark list at the end of each record: u64 count, then per watermark
// i32 epoch, i64 task, i64 next_batch.
constexpr int64_t kWatermarkBytes = 4 + 8 + 8;

static_assert(std::endian::native == std::endian::little, "the format is little-endian");

// "<what> <path>: <the system's reason>", from errno.
inline std::string Errno(const std::string& what, const std::string& path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

}  // namespace pstrain::checkpoint_layout

#endif  // PSTRAIN_COMMON_CHECKPOINT_LAYOUT_H_
