#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "common/checkpoint_layout.h"
#include "common/limits.h"
#include "common/tensor.h"

// The reading half of the part file (common/checkpoint_format.h); the writer is in
// checkpoint_format.cc. Everything read from a file is checked before anything is sized by it.
namespace pstrain {
namespace {

using namespace checkpoint_layout;  // NOLINT: the layout's constants, internal to this part

// Reads from a byte range, every read bounds-checked.
class Reader {
 public:
  Reader(const char* p, int64_t n) : p_(p), end_(p + n) {}
  bool ok() const { return ok_; }
  bool done() const { return p_ == end_; }
  int64_t left() const { return end_ - p_; }
  template <typename T>
  T Pod() {
    T v{};
    if (!Take(&v, sizeof(T))) return T{};
    return v;
  }
  std::string String() {
    const uint64_t n = Pod<uint64_t>();
    if (!ok_ || n > static_cast<uint64_t>(left())) return Fail<std::string>();
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> Array() {
    const uint64_t n = Pod<uint64_t>();
    if (!ok_ || n > static_cast<uint64_t>(left()) / sizeof(T)) return Fail<std::vector<T>>();
    std::vector<T> v(n);
    Take(v.data(), n * sizeof(T));
    return v;
  }

 private:
  template <typename T>
  T Fail() {
    ok_ = false;
    return T{};
  }
  bool Take(void* out, size_t n) {
    if (!ok_ || n > static_cast<size_t>(left())) return ok_ = false;
    if (n == 0) return true;  // an empty array: `out` may be null, which memcpy may not get
    std::memcpy(out, p_, n);
    p_ += n;
    return true;
  }
  const char* p_;
  const char* const end_;
  bool ok_ = true;
};

// Reads a format 2 watermark list; DataLoss for a negative field.
absl::Status ReadWatermarks(Reader* r, const std::string& owner,
                            std::vector<TaskWatermarkRecord>* out) {
  const uint64_t n = r->Pod<uint64_t>();
  if (!r->ok() || n > static_cast<uint64_t>(r->left()) / kWatermarkBytes) {
    return absl::DataLossError(absl::StrCat(owner, ": the watermark list runs past the end"));
  }
  out->resize(n);
  for (TaskWatermarkRecord& m : *out) {
    m.epoch = r->Pod<int32_t>();
    m.task = r->Pod<int64_t>();
    m.next_batch = r->Pod<int64_t>();
    if (m.epoch < 0 || m.task < 0 || m.next_batch < 0) {
      return absl::DataLossError(absl::StrCat(owner, ": a negative watermark (epoch ", m.epoch,
                                              ", task ", m.task, ", next_batch ", m.next_batch,
                                              ")"));
    }
  }
  return absl::OkStatus();
}

// The fields of a shard record against the limits, before the caller sizes anything by them.
absl::Status CheckShard(const ShardRecord& s) {
  auto bad = [&](auto... why) {
    return absl::DataLossError(
        absl::StrCat("shard '", s.name.substr(0, kMaxNameBytes), "': ", why...));
  };
  if (s.name.empty() || s.name.size() > static_cast<size_t>(kMaxNameBytes) || s.variable.empty() ||
      s.variable.size() > static_cast<size_t>(kMaxNameBytes) ||
      s.optimizer.size() > static_cast<size_t>(kMaxNameBytes)) {
    return bad("a name of ", s.name.size(), ", ", s.variable.size(), " or ", s.optimizer.size(),
               " bytes (names are 1 to ", kMaxNameBytes, ")");
  }
  if (s.optimizer_config.size() > static_cast<size_t>(kMaxTextBytes)) {
    return bad("an optimizer config of ", s.optimizer_config.size(), " bytes (at most ",
               kMaxTextBytes, ")");
  }
  const std::optional<int64_t> elements = CheckedNumElements(s.shape);
  const std::optional<int64_t> bytes = elements ? CheckedMul(*elements, 4) : std::nullopt;
  if (!bytes || *bytes > kMaxTensorBytes) {
    return bad("shape ",
               s.shape.size() > static_cast<size_t>(kMaxTensorRank)
                   ? absl::StrCat("of rank ", s.shape.size())
                   : ShapeString(s.shape),
               ": a dimension is negative, or it holds over ", kMaxTensorBytes,
               " bytes (rank at most ", kMaxTensorRank, ")");
  }
  const int64_t rows = s.shape.empty() ? 1 : s.shape[0];
  const int64_t row = rows > 0 ? *elements / rows : 0;
  if (s.row_begin < 0 || s.row_begin > s.row_end || s.row_end > rows ||
      static_cast<int64_t>(s.values.size()) != (s.row_end - s.row_begin) * row) {
    return bad("rows [", s.row_begin, ", ", s.row_end, ") with ", s.values.size(),
               " floats do not fit its shape of ", rows, " rows");
  }
  if (s.update_count < 0) return bad("update_count ", s.update_count, " is negative");
  return absl::OkStatus();
}

absl::Status CheckTable(const TableRecord& t) {
  auto bad = [&](auto... why) {
    return absl::DataLossError(
        absl::StrCat("table '", t.name.substr(0, kMaxNameBytes), "': ", why...));
  };
  if (t.name.empty() || t.name.size() > static_cast<size_t>(kMaxNameBytes)) {
    return bad("a name of ", t.name.size(), " bytes (names are 1 to ", kMaxNameBytes, ")");
  }
  if (t.table_def.size() > static_cast<size_t>(kMaxTextBytes)) {
    return bad("a table_def of ", t.table_def.size(), " bytes (at most ", kMaxTextBytes, ")");
  }
  if (t.dim < 1 || t.dim > kMaxTableDim || t.floats_per_row < t.dim ||
      t.floats_per_row % t.dim != 0 || t.floats_per_row / t.dim > 1 + kMaxOptimizerSlots) {
    return bad("dim ", t.dim, " with ", t.floats_per_row, " floats per row (dim 1 to ",
               kMaxTableDim, ", the row and up to ", kMaxOptimizerSlots, " slots of it)");
  }
  const size_t n = t.keys.size();
  if (t.floats.size() / static_cast<size_t>(t.floats_per_row) != n ||
      t.floats.size() % static_cast<size_t>(t.floats_per_row) != 0 ||
      (!t.step_counts.empty() && t.step_counts.size() != n) || t.last_update.size() != n) {
    return bad("the arrays do not match its ", n, " keys");
  }
  return absl::OkStatus();
}

// Reads the records; each count is checked against the bytes left before anything is sized by
// it, each record's fields against the limits, and each record must be as long as it says.
absl::Status ReadRecords(Reader* r, uint32_t version, PartFile* part) {
  while (r->ok() && !r->done()) {
    const uint8_t kind = r->Pod<uint8_t>();
    const uint64_t bytes = r->Pod<uint64_t>();
    if (!r->ok() || bytes > static_cast<uint64_t>(r->left())) break;
    const int64_t left_before = r->left();
    if (kind == kShardRecord) {
      if (part->shards.size() >= static_cast<size_t>(kMaxCheckpointVariables)) {
        return absl::DataLossError(
            absl::StrCat("more than ", kMaxCheckpointVariables, " shard records"));
      }
      ShardRecord s;
      s.name = r->String();
      s.variable = r->String();
      s.shape = r->Array<int64_t>();
      s.row_begin = r->Pod<int64_t>();
      s.row_end = r->Pod<int64_t>();
      s.version = r->Pod<uint64_t>();
      s.update_count = r->Pod<int64_t>();
      s.optimizer = r->String();
      s.optimizer_config = r->String();
      s.values = r->Array<float>();
      if (!r->ok()) break;
      if (absl::Status c = CheckShard(s); !c.ok()) return c;
      const uint64_t slots = r->Pod<uint64_t>();
      if (slots > static_cast<uint64_t>(kMaxOptimizerSlots)) {
        return absl::DataLossError(absl::StrCat("shard '", s.name, "': ", slots, " slots (at most ",
                                                kMaxOptimizerSlots, ")"));
      }
      for (uint64_t i = 0; r->ok() && i < slots; ++i) {
        SlotValues v;
        v.name = r->String();
        v.values = r->Array<float>();
        if (v.name.size() > static_cast<size_t>(kMaxNameBytes)) {
          return absl::DataLossError(
              absl::StrCat("shard '", s.name, "': a slot name of ", v.name.size(), " bytes"));
        }
        if (v.values.size() != s.values.size()) {
          return absl::DataLossError(absl::StrCat("shard '", s.name, "': slot '", v.name, "' has ",
                                                  v.values.size(), " floats, not ",
                                                  s.values.size()));
        }
        s.slots.push_back(std::move(v));
      }
      if (version >= 2 && r->ok()) {
        if (absl::Status w = ReadWatermarks(r, absl::StrCat("shard '", s.name, "'"), &s.applied);
            !w.ok()) {
          return w;
        }
      }
      part->shards.push_back(std::move(s));
    } else if (kind == kTableRecord) {
      if (part->tables.size() >= static_cast<size_t>(kMaxTables)) {
        return absl::DataLossError(absl::StrCat("more than ", kMaxTables, " table records"));
      }
      TableRecord t;
      t.name = r->String();
      t.table_def = r->String();
      t.dim = r->Pod<int32_t>();
      t.floats_per_row = r->Pod<int32_t>();
      t.version = r->Pod<uint64_t>();
      t.keys = r->Array<uint64_t>();
      t.floats = r->Array<float>();
      t.step_counts = r->Array<uint32_t>();
      t.last_update = r->Array<uint64_t>();
      if (!r->ok()) break;
      if (absl::Status c = CheckTable(t); !c.ok()) return c;
      if (version >= 2) {
        if (absl::Status w = ReadWatermarks(r, absl::StrCat("table '", t.name, "'"), &t.applied);
            !w.ok()) {
          return w;
        }
      }
      part->tables.push_back(std::move(t));
    } else {
      return absl::DataLossError(absl::StrCat("unknown record kind ", int{kind}));
    }
    if (r->ok() && static_cast<uint64_t>(left_before - r->left()) != bytes) {
      return absl::DataLossError(absl::StrCat("a record of kind ", int{kind}, " says ", bytes,
                                              " bytes but holds ", left_before - r->left()));
    }
  }
  if (!r->ok()) return absl::DataLossError("a record runs past the end of the file");
  return absl::OkStatus();
}

// A checkpoint's file, opened for reading: never through a symbolic link (a part or manifest
// is the checkpoint directory's own file, and a link could lead anywhere), never a FIFO or a
// device (O_NONBLOCK: opening a FIFO does not wait for a writer).
struct OpenFile {
  int fd = -1;
  int64_t bytes = 0;
  OpenFile() = default;
  OpenFile(OpenFile&& o) noexcept : fd(std::exchange(o.fd, -1)), bytes(o.bytes) {}
  OpenFile& operator=(OpenFile&&) = delete;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

absl::StatusOr<OpenFile> OpenRegular(const std::string& path) {
  OpenFile f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (f.fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(Errno("opening", path));
    if (errno == ELOOP) {
      return absl::DataLossError(absl::StrCat(
          path, " is a symbolic link: a checkpoint's files must be its directory's own"));
    }
    return absl::PermissionDeniedError(Errno("opening", path));
  }
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return absl::PermissionDeniedError(Errno("examining", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  }
  f.bytes = static_cast<int64_t>(st.st_size);
  return f;
}

// Reads exactly n bytes at `offset`; false (errno set) if the file ends first or a read fails.
bool PreadAll(int fd, char* out, int64_t n, int64_t offset) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, out, static_cast<size_t>(n), offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;  // shorter than its size said: cut while being read
      return false;
    }
    out += r;
    n -= r;
    offset += r;
  }
  return true;
}

// Sizes `data` to `n` bytes; false if the memory is not there (a part larger than this process
// can hold fails the restore instead of the process).
bool Allocate(std::string* data, int64_t n) {
  try {
    data->resize(static_cast<size_t>(n));
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  } catch (const std::length_error&) {
    return false;
  }
}

}  // namespace

absl::StatusOr<PartFile> ReadPartFile(const std::string& path, WrittenFile* info,
                                      int64_t expected_bytes) {
  absl::StatusOr<OpenFile> file = OpenRegular(path);
  if (!file.ok()) return file.status();
  auto bad = [&](auto... why) { return absl::DataLossError(absl::StrCat(path, ": ", why...)); };
  const int64_t n = file->bytes;
  if (expected_bytes >= 0 && n != expected_bytes) {
    return bad(n < expected_bytes ? "truncated: " : "", n, " bytes, the manifest says ",
               expected_bytes);
  }
  if (n < kHeaderBytes + kTrailerBytes) return bad("truncated (", n, " bytes)");
  // The trailer first: a file that is not a whole part (a sparse or foreign file, a cut copy) is
  // refused before its size is allocated.
  char trailer[kTrailerBytes];
  if (!PreadAll(file->fd, trailer, kTrailerBytes, n - kTrailerBytes)) {
    return bad("could not be read: ", std::strerror(errno));
  }
  int64_t body = 0;
  uint64_t checksum = 0;
  std::memcpy(&body, trailer + 8, 8);
  std::memcpy(&checksum, trailer + 16, 8);
  if (std::memcmp(trailer, kTrailerMagic, 8) != 0 || body != n - kTrailerBytes) {
    return bad("truncated or not a checkpoint part (no trailer at its end)");
  }
  std::string data;
  if (!Allocate(&data, body)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": its ", body, " bytes do not fit in this process's memory"));
  }
  if (!PreadAll(file->fd, data.data(), body, 0)) {
    return bad("could not be read whole: ", std::strerror(errno));
  }
  const uint64_t actual = XXH3_64bits(data.data(), static_cast<size_t>(body));
  if (actual != checksum) {
    return bad("checksum mismatch (XXH3 ", absl::Hex(actual), ", the trailer says ",
               absl::Hex(checksum), "): the file is corrupted");
  }
  if (std::memcmp(data.data(), kMagic, 8) != 0) return bad("not a checkpoint part (bad magic)");
  Reader r(data.data() + 8, body - 8);
  PartFile part;
  const uint32_t version = r.Pod<uint32_t>();
  if (version < kOldestCheckpointFormatVersion || version > kCheckpointFormatVersion) {
    return bad("format version ", version, ", this build reads ", kOldestCheckpointFormatVersion,
               " to ", kCheckpointFormatVersion);
  }
  part.ps_task = r.Pod<uint32_t>();
  part.num_ps = r.Pod<uint32_t>();
  part.checkpoint_id = r.Pod<uint64_t>();
  if (part.num_ps < 1 || part.num_ps > static_cast<uint32_t>(kMaxTasks) ||
      part.ps_task >= part.num_ps) {
    return bad("ps task ", part.ps_task, " of ", part.num_ps, " PS (1 to ", kMaxTasks, " PS)");
  }
  if (absl::Status s = ReadRecords(&r, version, &part); !s.ok()) return bad(s.message());
  if (info != nullptr) *info = {n, checksum};
  return part;
}

absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path, int64_t max_bytes) {
  absl::StatusOr<OpenFile> file = OpenRegular(path);
  if (!file.ok()) return file.status();
  if (file->bytes > max_bytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", file->bytes, " bytes, over the limit of ", max_bytes));
  }
  std::string data(static_cast<size_t>(file->bytes), '\0');
  if (!PreadAll(file->fd, data.data(), file->bytes, 0)) {
    return absl::DataLossError(absl::StrCat(path, ": could not be read: ", std::strerror(errno)));
  }
  return data;
}

}  // namespace pstrain
