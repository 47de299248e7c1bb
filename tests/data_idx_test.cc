// ReadIdx and LoadMnist on small files written by the test, plus Fashion-MNIST when installed.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Bytes = std::vector<uint8_t>;

// An IDX file: header for `dims` with type code `type`, then `data`.
Bytes Idx(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes Iota(size_t n, uint8_t start = 0) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("pstrain_idx_") + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string WriteRaw(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(f.good()) << path;
    return path;
  }
  std::string WriteGz(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (f == nullptr) return path;
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }
  // Writes a synthetic MNIST-layout split: n images of 2x3 pixels, labels i % 10.
  void WriteSplit(const std::string& split, int n, bool gz, uint8_t pixel_base = 0) {
    Bytes labels(n);
    for (int i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
    const Bytes images = Idx({static_cast<uint32_t>(n), 2, 3}, Iota(6 * n, pixel_base));
    const Bytes label_file = Idx({static_cast<uint32_t>(n)}, labels);
    if (gz) {
      WriteGz(split + "-images-idx3-ubyte.gz", images);
      WriteGz(split + "-labels-idx1-ubyte.gz", label_file);
    } else {
      WriteRaw(split + "-images-idx3-ubyte", images);
      WriteRaw(split + "-labels-idx1-ubyte", label_file);
    }
  }

  fs::path dir_;
};

TEST_F(IdxTest, ReadsRaw) {
  const std::string path = WriteRaw("a-idx3-ubyte", Idx({2, 3, 4}, Iota(24)));
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->dims, ElementsAre(2, 3, 4));
  EXPECT_EQ(a->data, Iota(24));
}

TEST_F(IdxTest, ReadsGzip) {
  const std::string path = WriteGz("a-idx1-ubyte.gz", Idx({5}, Iota(5, 250)));
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->dims, ElementsAre(5));
  EXPECT_THAT(a->data, ElementsAre(250, 251, 252, 253, 254));
}

TEST_F(IdxTest, ReadsLargeGzipAcrossBufferGrowth) {
  // Bigger than the reader's first 1 MiB chunk, so the buffer has to grow.
  const Bytes data = Iota(3 * 1000 * 1000 + 7, 3);
  absl::StatusOr<IdxArray> a = ReadIdx(WriteGz("big.gz", Idx({3000007}, data)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data, data);
}

TEST_F(IdxTest, DetectsGzipFromContentNotName) {
  const Bytes file = Idx({2, 2}, {1, 2, 3, 4});
  absl::StatusOr<IdxArray> gz_no_suffix = ReadIdx(WriteGz("plain-name", file));
  ASSERT_TRUE(gz_no_suffix.ok()) << gz_no_suffix.status();
  EXPECT_THAT(gz_no_suffix->data, ElementsAre(1, 2, 3, 4));
  absl::StatusOr<IdxArray> raw_gz_suffix = ReadIdx(WriteRaw("looks.gz", file));
  ASSERT_TRUE(raw_gz_suffix.ok()) << raw_gz_suffix.status();
  EXPECT_THAT(raw_gz_suffix->dims, ElementsAre(2, 2));
}

TEST_F(IdxTest, ZeroSizedDimension) {
  absl::StatusOr<IdxArray> a = ReadIdx(WriteRaw("empty", Idx({0, 28, 28}, {})));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->dims, ElementsAre(0, 28, 28));
  EXPECT_TRUE(a->data.empty());
}

// Asserts that reading `path` fails with `code` and a message naming the path and `problem`.
void ExpectError(const std::string& path, absl::StatusCode code, const std::string& problem) {
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  ASSERT_FALSE(a.ok()) << path;
  EXPECT_EQ(a.status().code(), code) << a.status();
  EXPECT_THAT(std::string(a.status().message()), AllOf(HasSubstr(path), HasSubstr(problem)));
}

TEST_F(IdxTest, MissingFile) {
  ExpectError((dir_ / "nope-idx3-ubyte").string(), absl::StatusCode::kNotFound, "no such file");
}

TEST_F(IdxTest, BadMagic) {
  ExpectError(WriteRaw("bad", {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 0}),
              absl::StatusCode::kInvalidArgument, "bad magic 0x12340801");
  ExpectError(WriteGz("bad.gz", {0x01, 0x00, 0x08, 0x01, 0, 0, 0, 0}),
              absl::StatusCode::kInvalidArgument, "bad magic");
}

TEST_F(IdxTest, UnsupportedType) {
  // 0x0D is float32: a valid IDX type this reader does not support.
  ExpectError(WriteRaw("float", Idx({1}, {0, 0, 0, 0}, 0x0D)), absl::StatusCode::kInvalidArgument,
              "unsupported element type 0x0d");
}

TEST_F(IdxTest, TooManyDims) {
  ExpectError(WriteRaw("dims9", Idx(std::vector<uint32_t>(9, 1), {7})),
              absl::StatusCode::kInvalidArgument, "too many dimensions: 9");
}

TEST_F(IdxTest, NoDims) {
  ExpectError(WriteRaw("dims0", Idx({}, {7})), absl::StatusCode::kInvalidArgument, "no dimensions");
}

TEST_F(IdxTest, TruncatedHeader) {
  ExpectError(WriteRaw("short", {0, 0, 8}), absl::StatusCode::kInvalidArgument, "truncated header");
  ExpectError(WriteRaw("short-dims", {0, 0, 8, 3, 0, 0, 0, 2}), absl::StatusCode::kInvalidArgument,
              "truncated header");
  ExpectError(WriteRaw("empty-file", {}), absl::StatusCode::kInvalidArgument, "truncated header");
}

TEST_F(IdxTest, TruncatedData) {
  ExpectError(WriteRaw("trunc", Idx({2, 3}, Iota(5))), absl::StatusCode::kInvalidArgument,
              "truncated data: dims [2, 3] need 6 data bytes, file has 5");
  ExpectError(WriteGz("trunc.gz", Idx({2, 3}, Iota(5))), absl::StatusCode::kInvalidArgument,
              "truncated data: dims [2, 3] need 6 data bytes, decompressed data has 5");
}

TEST_F(IdxTest, HugeDeclaredSizeIsTruncatedNotAllocated) {
  const std::vector<uint32_t> dims = {0xffffffffu, 0xffffffffu, 0xffffffffu};
  ExpectError(WriteRaw("huge", Idx(dims, Iota(10))), absl::StatusCode::kInvalidArgument,
              "truncated data");
}

TEST_F(IdxTest, TruncatedGzipStream) {
  // A .gz whose compressed stream is cut off mid-way.
  Bytes data(5000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 7919) % 251);
  const std::string full = WriteGz("full.gz", Idx({5000}, data));
  std::ifstream in(full, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  ExpectError(WriteRaw("cut.gz", gz), absl::StatusCode::kDataLoss,
              "truncated or corrupt gzip stream");
}

TEST_F(IdxTest, TrailingBytes) {
  Bytes extra = Idx({2}, {1, 2});
  extra.push_back(9);
  extra.push_back(9);
  ExpectError(WriteRaw("trail", extra), absl::StatusCode::kInvalidArgument,
              "2 trailing bytes after the 2 data bytes");
  ExpectError(WriteGz("trail.gz", extra), absl::StatusCode::kInvalidArgument,
              "2 trailing bytes after the 2 data bytes");
}

TEST_F(IdxTest, DirectoryIsNotAFile) {
  ExpectError(dir_.string(), absl::StatusCode::kInvalidArgument, "is a directory");
}

TEST_F(IdxTest, LoadMnistRawAndGzip) {
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "raw");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    WriteSplit("train", 12, gz);
    absl::StatusOr<Examples> ds = LoadMnist(dir_.string(), "train");
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(ds->size(), 12);
    EXPECT_EQ(ds->dense_dim, 6);
    EXPECT_EQ(ds->labels[11], 1);
    EXPECT_FLOAT_EQ(ds->dense[0], 0.0f);
    EXPECT_FLOAT_EQ(ds->dense[5], 5.0f / 255.0f);
    EXPECT_FLOAT_EQ(ds->dense[1 * 6 + 2], 8.0f / 255.0f);
    EXPECT_FLOAT_EQ(ds->dense[11 * 6 + 5], 71.0f / 255.0f);
  }
}

TEST_F(IdxTest, LoadMnistPrefersRaw) {
  WriteSplit("t10k", 3, /*gz=*/true, /*pixel_base=*/100);
  WriteSplit("t10k", 3, /*gz=*/false, /*pixel_base=*/0);
  absl::StatusOr<Examples> ds = LoadMnist(dir_.string(), "t10k");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_FLOAT_EQ(ds->dense[0], 0.0f);
}

TEST_F(IdxTest, LoadMnistMissingListsPaths) {
  absl::StatusOr<Examples> ds = LoadMnist(dir_.string(), "train");
  ASSERT_EQ(ds.status().code(), absl::StatusCode::kNotFound) << ds.status();
  const std::string base = (dir_ / "train-images-idx3-ubyte").string();
  EXPECT_THAT(std::string(ds.status().message()),
              AllOf(HasSubstr(base + " and " + base + ".gz"), HasSubstr("train images")));

  WriteRaw("train-images-idx3-ubyte", Idx({1, 1, 1}, {0}));
  ds = LoadMnist(dir_.string(), "train");
  ASSERT_EQ(ds.status().code(), absl::StatusCode::kNotFound) << ds.status();
  EXPECT_THAT(std::string(ds.status().message()),
              HasSubstr((dir_ / "train-labels-idx1-ubyte.gz").string()));
}

TEST_F(IdxTest, LoadMnistChecksShapesCountsAndLabels) {
  const std::string images = WriteRaw("x-images-idx3-ubyte", Idx({2, 6}, Iota(12)));
  const std::string labels = WriteRaw("x-labels-idx1-ubyte", Idx({2}, {0, 1}));
  absl::StatusOr<Examples> ds = LoadMnist(dir_.string(), "x");
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()),
              AllOf(HasSubstr(images), HasSubstr("must have 3 dimensions"), HasSubstr("[2, 6]")));

  WriteRaw("x-images-idx3-ubyte", Idx({2, 2, 3}, Iota(12)));
  WriteRaw("x-labels-idx1-ubyte", Idx({2, 1}, {0, 1}));
  ds = LoadMnist(dir_.string(), "x");
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()),
              AllOf(HasSubstr(labels), HasSubstr("must have 1 dimension")));

  WriteRaw("x-labels-idx1-ubyte", Idx({3}, {0, 1, 2}));
  ds = LoadMnist(dir_.string(), "x");
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()),
              AllOf(HasSubstr("count mismatch"), HasSubstr(images), HasSubstr(labels),
                    HasSubstr("2 images"), HasSubstr("3 labels")));

  WriteRaw("x-labels-idx1-ubyte", Idx({2}, {0, 10}));
  ds = LoadMnist(dir_.string(), "x");
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()),
              AllOf(HasSubstr(labels), HasSubstr("label 10 at index 1 is out of range")));

  WriteRaw("x-labels-idx1-ubyte", {0, 0, 8});
  ds = LoadMnist(dir_.string(), "x");
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()),
              AllOf(HasSubstr(labels), HasSubstr("truncated header")));
}

constexpr char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

TEST(FashionMnistTest, LoadsRealData) {
  if (!fs::is_directory(kFashionDir)) {
    GTEST_SKIP() << kFashionDir << " not found (install the Debian package dataset-fashion-mnist)";
  }
  for (const auto& [split, n] :
       {std::pair<std::string, int64_t>{"train", 60000}, {"t10k", 10000}}) {
    SCOPED_TRACE(split);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Examples> ds = LoadMnist(kFashionDir, split);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(ds.ok()) << ds.status();
    std::printf("LoadMnist(%s, %s): %.1f ms\n", kFashionDir, split.c_str(), ms);
    EXPECT_EQ(ds->size(), n);
    EXPECT_EQ(ds->dense_dim, 784);
    EXPECT_EQ(ds->dense.size(), static_cast<size_t>(n * 784));
    EXPECT_GE(*std::min_element(ds->dense.begin(), ds->dense.end()), 0.0f);
    EXPECT_LE(*std::max_element(ds->dense.begin(), ds->dense.end()), 1.0f);
    EXPECT_GT(*std::max_element(ds->dense.begin(), ds->dense.end()), 0.99f);
    std::array<int64_t, 10> counts{};
    for (float l : ds->labels) {
      const int label = static_cast<int>(l);
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 10);
      ++counts[label];
    }
    for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], n / 10) << "class " << c;
  }
}

}  // namespace
}  // namespace pstrain
