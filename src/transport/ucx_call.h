// Pieces both ends of the UCX transport (ucx.h) share: the sizes of a message's tensors, and the
// PS's threads that run the DataHandler off the progress thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/transport.h"
#include "transport/ucx_wire.h"

namespace pstrain {

// Bytes of `t` as its dtype and shape say; InvalidArgument naming `name` for an unknown dtype, a
// negative dimension, a rank past kMaxTensorRank or a size that overflows.
absl::StatusOr<int64_t> TensorBytes(const TensorProto& t, const std::string& name);

// Points grads[i] at gradient i's bytes within `bytes` (the gradients back to back in `head`'s
// order); InvalidArgument naming the gradient unless their sizes add up to exactly `size`.
absl::Status SplitTensorBytes(const PushRequest& head, const char* bytes, uint64_t size,
                              std::vector<ConstBytes>* grads);

// Buffers for the tensors a PS receives and sends, kept for reuse: a fresh buffer per request
// costs page faults and zeroing of every page, more than the copy into it. Thread-safe.
class BufferPool {
 public:
  class Buffer {
   public:
    Buffer() = default;
    Buffer(BufferPool* pool, std::unique_ptr<char[]> data, size_t capacity)
        : pool_(pool), data_(std::move(data)), capacity_(capacity) {}
    Buffer(Buffer&&) = default;
    Buffer& operator=(Buffer&& other) {
      Release();
      pool_ = other.pool_;
      data_ = std::move(other.data_);
      capacity_ = other.capacity_;
      return *this;
    }
    ~Buffer() { Release(); }
    char* data() const { return data_.get(); }

   private:
    void Release() {
      if (pool_ != nullptr && data_ != nullptr) pool_->Give(std::move(data_), capacity_);
    }
    BufferPool* pool_ = nullptr;
    std::unique_ptr<char[]> data_;
    size_t capacity_ = 0;
  };
  // At least `size` bytes, not zeroed.
  Buffer Take(size_t size);

 private:
  static constexpr size_t kKept = 8;
  void Give(std::unique_ptr<char[]> data, size_t capacity);
  absl::Mutex mu_;
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> free_ ABSL_GUARDED_BY(mu_);
};

// Checks a request's header (UCP active-message header `header`, data of `length` bytes) and
// fills `wire`: Unauthenticated without this process's job token (security.h TokenMatches);
// InvalidArgument for a bad magic, an unknown method, or sizes past ucx_wire.h's limits. Before
// anything of the data is received or allocated.
absl::Status CheckRequest(const void* header, size_t header_length, uint64_t length,
                          WireRequest* wire);

// A fixed set of threads running what Run hands them, in order of arrival.
class UcxThreadPool {
 public:
  explicit UcxThreadPool(int threads);
  ~UcxThreadPool() { Stop(); }
  void Run(std::function<void()> fn);
  // Runs what is queued, then joins the threads. Idempotent.
  void Stop();

 private:
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace pstrain
