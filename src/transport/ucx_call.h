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

// Checks a request's header (UCP active-message header `header`, data of `length` bytes) and
// fills `wire`: Unauthenticated without this process's job token (security.h TokenMatches);
// InvalidArgument for a bad magic, an unknown method, or sizes past ucx_wire.h's limits (a
// hello's data is its head: the worker address). Before anything of the data is received or
// allocated. A pure function of its arguments and the job's token.
absl::Status CheckRequest(const void* header, size_t header_length, uint64_t length,
                          WireRequest* wire);

// The data of a request CheckRequest passed (`wire`; `size` bytes at `data`) as the PS reads
// it: a Pull's head into `pull`; a Push's head into `push` and each gradient's bytes into
// `grads` (pointing into `data`). InvalidArgument naming what does not parse or add up.
absl::Status ParseRequest(const WireRequest& wire, const char* data, uint64_t size,
                          PullRequest* pull, PushRequest* push, std::vector<ConstBytes>* grads);

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
