// IDX reader: raw or gzip-compressed files of unsigned bytes.
//
// Layout (big-endian): two zero bytes, a type code (0x08 = unsigned byte), the number of
// dimensions, then one uint32 per dimension, then product(dims) elements in row-major order.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "data/data.h"
#include "data/files.h"

namespace pstrain {
namespace {

constexpr int kMaxIdxDims = 8;
constexpr uint8_t kUnsignedByte = 0x08;

// A byte stream over either a plain file or a gzip file. Read() fills as much of the buffer as
// the stream has and returns the count; a short count means end of data, or an error (error()).
class ByteSource {
 public:
  ~ByteSource() {
    if (file_ != nullptr) std::fclose(file_);
    if (gz_ != nullptr) gzclose(gz_);
  }

  absl::Status Open(const std::string& path) {
    path_ = path;
    if (absl::Status s = CheckIsFile(path, "an IDX file"); !s.ok()) return s;
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) return OpenError();
    unsigned char magic[2] = {0, 0};
    const size_t got = std::fread(magic, 1, 2, file_);
    if (std::ferror(file_)) return ReadError();
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
      std::fclose(file_);
      file_ = nullptr;
      gzip_ = true;
      gz_ = gzopen(path.c_str(), "rb");
      if (gz_ == nullptr) return OpenError();
      gzbuffer(gz_, 1 << 18);
    } else {
      std::rewind(file_);
      std::error_code size_ec;
      const auto size = std::filesystem::file_size(path, size_ec);
      if (!size_ec) raw_size_ = static_cast<int64_t>(size);
    }
    return absl::OkStatus();
  }

  int64_t Read(void* buf, int64_t n) {
    char* out = static_cast<char*>(buf);
    int64_t total = 0;
    while (total < n && !failed_) {
      const int64_t want = std::min<int64_t>(n - total, 1 << 30);
      int64_t got;
      if (gzip_) {
        const int r = gzread(gz_, out + total, static_cast<unsigned>(want));
        if (r < 0) {
          failed_ = true;
          break;
        }
        got = r;
      } else {
        got = static_cast<int64_t>(std::fread(out + total, 1, static_cast<size_t>(want), file_));
        if (std::ferror(file_)) failed_ = true;
      }
      total += got;
      if (got < want) break;
    }
    if (gzip_ && !failed_ && total < n) {
      // zlib reports a stream that ends mid-member (a truncated .gz) as an error at EOF.
      int err = Z_OK;
      gzerror(gz_, &err);
      if (err != Z_OK) failed_ = true;
    }
    return total;
  }

  bool failed() const { return failed_; }
  bool gzip() const { return gzip_; }
  int64_t raw_size() const { return raw_size_; }  // -1 when unknown or compressed

  absl::Status ReadError() const {
    if (gzip_) {
      int err = Z_OK;
      const char* msg = gzerror(gz_, &err);
      return absl::DataLossError(absl::StrCat(
          path_, ": truncated or corrupt gzip stream: ", msg != nullptr ? msg : "unknown error"));
    }
    return absl::DataLossError(absl::StrCat(path_, ": read error: ", std::strerror(errno)));
  }

 private:
  absl::Status OpenError() const {
    const int e = errno;
    const std::string msg = absl::StrCat(path_, ": cannot open: ", std::strerror(e));
    if (e == ENOENT) return absl::NotFoundError(msg);
    if (e == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }

  std::string path_;
  FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
  bool gzip_ = false;
  bool failed_ = false;
  int64_t raw_size_ = -1;
};

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(const std::string& path) {
  ByteSource src;
  if (absl::Status s = src.Open(path); !s.ok()) return s;
  const char* what = src.gzip() ? "decompressed data" : "file";

  unsigned char magic[4];
  int64_t got = src.Read(magic, 4);
  if (src.failed()) return src.ReadError();
  if (got < 4) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated header: ", what, " has ", got,
                                                   " bytes, an IDX header needs 4"));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad magic 0x%08x: an IDX file starts with two zero bytes, a type "
                        "code and the number of dimensions (e.g. 0x00000803)",
                        path, BigEndian32(magic)));
  }
  if (magic[2] != kUnsignedByte) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unsupported element type 0x%02x: only unsigned byte (0x08) is "
                        "supported",
                        path, magic[2]));
  }
  const int ndims = magic[3];
  if (ndims == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": IDX header declares no dimensions"));
  }
  if (ndims > kMaxIdxDims) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": too many dimensions: ", ndims,
                                                   " (at most ", kMaxIdxDims, " supported)"));
  }

  unsigned char dim_bytes[4 * kMaxIdxDims];
  got = src.Read(dim_bytes, 4 * ndims);
  if (src.failed()) return src.ReadError();
  if (got < 4 * ndims) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated header: ", ndims,
                                                   " dimensions need ", 4 + 4 * ndims,
                                                   " header bytes, ", what, " has ", 4 + got));
  }
  IdxArray out;
  out.dims.resize(ndims);
  // Element count, saturated so absurd headers cannot overflow.
  constexpr int64_t kCap = std::numeric_limits<int64_t>::max();
  int64_t count = 1;
  for (int i = 0; i < ndims; ++i) {
    out.dims[i] = BigEndian32(dim_bytes + 4 * i);
    if (out.dims[i] == 0) {
      count = 0;
    } else if (count != kCap) {
      count = count > kCap / out.dims[i] ? kCap : count * out.dims[i];
    }
  }
  const int64_t header = 4 + 4 * int64_t{ndims};
  const std::string shape = absl::StrCat("[", absl::StrJoin(out.dims, ", "), "]");

  if (src.raw_size() >= 0) {
    // Plain file: the size says everything up front, without allocating for a bogus header.
    const int64_t have = src.raw_size() - header;
    if (have < count) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": truncated data: dims ", shape, " need ", count, " data bytes, file has ", have));
    }
    if (have > count) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", have - count,
                                                     " trailing bytes after the ", count,
                                                     " data bytes of dims ", shape));
    }
    out.data.resize(static_cast<size_t>(count));
    got = src.Read(out.data.data(), count);
    if (src.failed()) return src.ReadError();
    if (got < count) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated data: dims ", shape,
                                                     " need ", count, " data bytes, read ", got));
    }
    return out;
  }

  // Compressed: the decompressed size is unknown, so grow the buffer as data arrives.
  int64_t filled = 0;
  while (filled < count) {
    const int64_t next = std::min<int64_t>(count, std::max<int64_t>(filled * 2, 1 << 20));
    out.data.resize(static_cast<size_t>(next));
    got = src.Read(out.data.data() + filled, next - filled);
    filled += got;
    if (src.failed()) return src.ReadError();
    if (filled < next) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated data: dims ", shape,
                                                     " need ", count, " data bytes, ", what,
                                                     " has ", filled));
    }
  }
  int64_t extra = 0;
  char sink[4096];
  while ((got = src.Read(sink, sizeof(sink))) > 0) extra += got;
  if (src.failed()) return src.ReadError();
  if (extra > 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", extra, " trailing bytes after the ",
                                                   count, " data bytes of dims ", shape, " (", what,
                                                   ")"));
  }
  return out;
}

}  // namespace pstrain
