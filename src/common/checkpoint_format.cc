#include "common/checkpoint_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"

// The writing half of the part file; the reading half is in checkpoint_read.cc.
namespace pstrain {
namespace {

using namespace checkpoint_layout;  // NOLINT: the layout's constants, internal to this part

constexpr size_t kBufferBytes = size_t{4} << 20;

template <typename T>
int64_t ArrayBytes(const std::vector<T>& v) {
  return 8 + static_cast<int64_t>(v.size() * sizeof(T));
}
int64_t StringBytes(const std::string& s) { return 8 + static_cast<int64_t>(s.size()); }

int64_t ShardBytes(const ShardRecord& r) {
  int64_t n = StringBytes(r.name) + StringBytes(r.variable) + ArrayBytes(r.shape) + 8 * 4 +
              StringBytes(r.optimizer) + StringBytes(r.optimizer_config) + ArrayBytes(r.values) + 8;
  for (const SlotValues& s : r.slots) n += StringBytes(s.name) + ArrayBytes(s.values);
  return n;
}

int64_t TableBytes(const TableRecord& r) {
  return StringBytes(r.name) + StringBytes(r.table_def) + 4 + 4 + 8 + ArrayBytes(r.keys) +
         ArrayBytes(r.floats) + ArrayBytes(r.step_counts) + ArrayBytes(r.last_update);
}

int64_t WatermarksBytes(const std::vector<TaskWatermarkRecord>& v, uint32_t version) {
  return version < 2 ? 0 : 8 + kWatermarkBytes * static_cast<int64_t>(v.size());
}

// Buffered writes through one descriptor, hashing everything written.
class Writer {
 public:
  Writer(int fd, std::string path) : fd_(fd), path_(std::move(path)), buf_(new char[kBufferBytes]) {
    XXH3_64bits_reset(state_.get());
  }

  void Bytes(const void* p, size_t n) {
    if (!status_.ok() || n == 0) return;  // an empty string or array may have no memory at all
    XXH3_64bits_update(state_.get(), p, n);
    written_ += static_cast<int64_t>(n);
    if (used_ + n <= kBufferBytes) {
      std::memcpy(buf_.get() + used_, p, n);
      used_ += n;
      return;
    }
    Flush();
    WriteAll(static_cast<const char*>(p), n);  // large arrays go straight from their memory
  }
  template <typename T>
  void Pod(T v) {
    Bytes(&v, sizeof(v));
  }
  void String(const std::string& s) {
    Pod<uint64_t>(s.size());
    Bytes(s.data(), s.size());
  }
  template <typename T>
  void Array(const std::vector<T>& v) {
    Pod<uint64_t>(v.size());
    Bytes(v.data(), v.size() * sizeof(T));
  }
  void Watermarks(const std::vector<TaskWatermarkRecord>& v) {
    Pod<uint64_t>(v.size());
    for (const TaskWatermarkRecord& m : v) {
      Pod<int32_t>(m.epoch);
      Pod<int64_t>(m.task);
      Pod<int64_t>(m.next_batch);
    }
  }
  // Flushes and returns the status of every write so far.
  absl::Status Finish() {
    Flush();
    return status_;
  }
  uint64_t digest() const { return XXH3_64bits_digest(state_.get()); }
  int64_t written() const { return written_; }

 private:
  struct FreeState {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  void Flush() {
    WriteAll(buf_.get(), used_);
    used_ = 0;
  }
  void WriteAll(const char* p, size_t n) {
    while (n > 0 && status_.ok()) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = ENOSPC;
        status_ = absl::ResourceExhaustedError(Errno("writing", path_));
        return;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  const int fd_;
  const std::string path_;
  std::unique_ptr<char[]> buf_;
  size_t used_ = 0;
  int64_t written_ = 0;
  std::unique_ptr<XXH3_state_t, FreeState> state_{XXH3_createState()};
  absl::Status status_;
};

void WriteBody(const PartFile& part, uint32_t version, Writer* w) {
  w->Bytes(kMagic, sizeof(kMagic));
  w->Pod<uint32_t>(version);
  w->Pod<uint32_t>(part.ps_task);
  w->Pod<uint32_t>(part.num_ps);
  w->Pod<uint64_t>(part.checkpoint_id);
  for (const ShardRecord& r : part.shards) {
    w->Pod<uint8_t>(kShardRecord);
    w->Pod<uint64_t>(ShardBytes(r) + WatermarksBytes(r.applied, version));
    w->String(r.name);
    w->String(r.variable);
    w->Array(r.shape);
    w->Pod<int64_t>(r.row_begin);
    w->Pod<int64_t>(r.row_end);
    w->Pod<uint64_t>(r.version);
    w->Pod<int64_t>(r.update_count);
    w->String(r.optimizer);
    w->String(r.optimizer_config);
    w->Array(r.values);
    w->Pod<uint64_t>(r.slots.size());
    for (const SlotValues& s : r.slots) {
      w->String(s.name);
      w->Array(s.values);
    }
    if (version >= 2) w->Watermarks(r.applied);
  }
  for (const TableRecord& r : part.tables) {
    w->Pod<uint8_t>(kTableRecord);
    w->Pod<uint64_t>(TableBytes(r) + WatermarksBytes(r.applied, version));
    w->String(r.name);
    w->String(r.table_def);
    w->Pod<int32_t>(r.dim);
    w->Pod<int32_t>(r.floats_per_row);
    w->Pod<uint64_t>(r.version);
    w->Array(r.keys);
    w->Array(r.floats);
    w->Array(r.step_counts);
    w->Array(r.last_update);
    if (version >= 2) w->Watermarks(r.applied);
  }
}

absl::Status SyncDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(Errno("opening the directory", dir));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(Errno("syncing the directory", dir));
  return absl::OkStatus();
}

// Writes with `write_body` (and, with `trailer`, the part file's trailer) to path.tmp, then
// fsync, rename, fsync of the directory.
template <typename WriteBodyFn>
absl::StatusOr<WrittenFile> WriteAtomically(const std::string& path, bool trailer,
                                            WriteBodyFn write_body) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(Errno("creating", tmp));
  Writer w(fd, tmp);
  write_body(&w);
  WrittenFile file;
  file.checksum = w.digest();
  const int64_t before_trailer = w.written();
  if (trailer) {
    w.Bytes(kTrailerMagic, sizeof(kTrailerMagic));
    w.Pod<int64_t>(before_trailer);
    w.Pod<uint64_t>(file.checksum);
  }
  file.bytes = w.written();
  absl::Status s = w.Finish();
  if (s.ok() && ::fsync(fd) != 0) s = absl::ResourceExhaustedError(Errno("syncing", tmp));
  if (::close(fd) != 0 && s.ok()) s = absl::ResourceExhaustedError(Errno("closing", tmp));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::InternalError(Errno("renaming to " + path + ":", tmp));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (absl::Status d = SyncDirectory(path); !d.ok()) return d;
  return file;
}

}  // namespace

int64_t PartFile::PayloadBytes() const {
  int64_t n = 0;
  for (const ShardRecord& s : shards) n += ShardBytes(s);
  for (const TableRecord& t : tables) n += TableBytes(t);
  return n;
}

absl::StatusOr<WrittenFile> WritePartFile(const PartFile& part, const std::string& path,
                                          uint32_t format_version) {
  if (format_version < kOldestCheckpointFormatVersion ||
      format_version > kCheckpointFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("format version ", format_version, ": this build writes ",
                     kOldestCheckpointFormatVersion, " to ", kCheckpointFormatVersion));
  }
  return WriteAtomically(path, true, [&](Writer* w) { WriteBody(part, format_version, w); });
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  return WriteAtomically(path, false, [&](Writer* w) { w->Bytes(text.data(), text.size()); })
      .status();
}

}  // namespace pstrain
