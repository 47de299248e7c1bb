// Internal to fuzz/: what the libFuzzer targets share. A target is one *_fuzz.cc with
// LLVMFuzzerTestOneInput; fuzz/README.md says how to build and run them.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace pstrain::fuzz {

// A property the code under test broke: abort, which libFuzzer reports as a crash and saves the
// input that caused it.
#define FUZZ_CHECK(cond, what)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                              \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

// One temporary directory per process (readers that take a path read the input from a file in
// it), removed when the process exits normally. A crash leaves it for the post-mortem.
inline const std::string& TempDir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors
  // registered later than it.
  static const std::string* const dir = [] {
    const char* base = std::getenv("TMPDIR");
    auto* path = new std::string(std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                                 "/pstrain-fuzz-XXXXXX");
    if (::mkdtemp(path->data()) == nullptr) {
      std::perror("pstrain fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(TempDir(), ec);
    });
    return path;
  }();
  return *dir;
}

// Writes `bytes` to <TempDir()>/<name> (replacing it) and returns the path.
inline std::string WriteTempFile(const std::string& name, std::string_view bytes) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::perror(("pstrain fuzz: writing " + path).c_str());
    std::abort();
  }
  return path;
}

// An input made of several messages (a stream's chunks): they are separated by kSeparator.
inline constexpr std::string_view kSeparator = "\n--next--\n";
inline std::vector<std::string_view> SplitMessages(std::string_view input) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t at = input.find(kSeparator);
    out.push_back(input.substr(0, at));
    if (at == std::string_view::npos) return out;
    input.remove_prefix(at + kSeparator.size());
  }
}

// `bytes` as gRPC would hand them over: in slices, their sizes drawn from `pattern` (0: one slice;
// else sizes cycle through 1 + the pattern's bits), so readers meet fields cut across slices at
// any position and alignment.
inline grpc::ByteBuffer ToByteBuffer(std::string_view bytes, uint8_t pattern) {
  std::vector<grpc::Slice> slices;
  if (pattern == 0 || bytes.empty()) {
    slices.emplace_back(bytes.data(), bytes.size());
  } else {
    static constexpr size_t kSizes[] = {1, 3, 4, 7, 16, 64, 1000, 4096};
    for (size_t at = 0, i = 0; at < bytes.size(); ++i) {
      const size_t n = std::min(bytes.size() - at, kSizes[(pattern >> (i % 8)) % 8] + i % 3);
      slices.emplace_back(bytes.data() + at, n);
      at += n;
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace pstrain::fuzz
