#include "transport/ucx_call.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/limits.h"
#include "common/security.h"

namespace pstrain {

absl::StatusOr<int64_t> TensorBytes(const TensorProto& t, const std::string& name) {
  const int width = DtypeBytes(t.dtype());
  if (width == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\" has unknown dtype ", static_cast<int>(t.dtype())));
  }
  if (t.shape_size() > kMaxTensorRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\" has rank ", t.shape_size(), " past ", kMaxTensorRank));
  }
  std::optional<int64_t> bytes = width;
  for (int64_t d : t.shape()) {
    bytes = d < 0 ? std::nullopt : CheckedMul(*bytes, d);
    if (!bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", name, "\" has a negative or overflowing shape"));
    }
  }
  return *bytes;
}

absl::Status SplitTensorBytes(const PushRequest& head, const char* bytes, uint64_t size,
                              std::vector<ConstBytes>* grads) {
  grads->clear();
  grads->reserve(head.gradients_size());
  uint64_t offset = 0;
  for (const Gradient& g : head.gradients()) {
    absl::StatusOr<int64_t> n = TensorBytes(g.gradient(), g.name());
    if (!n.ok()) return n.status();
    if (static_cast<uint64_t>(*n) > size - offset) {
      return absl::InvalidArgumentError(absl::StrCat("gradient \"", g.name(), "\" needs ", *n,
                                                     " bytes; the request carries ", size - offset,
                                                     " more"));
    }
    grads->push_back({bytes + offset, *n});
    offset += *n;
  }
  if (offset != size) {
    return absl::InvalidArgumentError(absl::StrCat("the request carries ", size,
                                                   " tensor bytes; its ", head.gradients_size(),
                                                   " gradients need ", offset));
  }
  return absl::OkStatus();
}

absl::Status CheckRequest(const void* header, size_t header_length, uint64_t length,
                          WireRequest* wire) {
  *wire = WireRequest();
  if (header_length < sizeof(*wire)) {
    return absl::InvalidArgumentError("a data-plane request shorter than its header");
  }
  std::memcpy(wire, header, sizeof(*wire));
  if (wire->magic != kWireMagic || header_length != sizeof(*wire) + wire->token_bytes) {
    return absl::InvalidArgumentError("a data-plane request with a malformed header");
  }
  const std::shared_ptr<const Security> security = GetSecurity();
  if (!security->token.empty() &&
      !TokenMatches(
          absl::string_view(static_cast<const char*>(header) + sizeof(*wire), wire->token_bytes),
          security->token)) {
    return absl::UnauthenticatedError("the request lacks the job's token");
  }
  const auto method = static_cast<WireMethod>(wire->method);
  if (method != WireMethod::kPush && method != WireMethod::kPull && method != WireMethod::kHello) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown data-plane request method ", wire->method));
  }
  if (method == WireMethod::kHello &&
      (length != wire->head_bytes || length == 0 || length > kMaxWireAddressBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a data-plane hello of ", length, " bytes (1 to ", kMaxWireAddressBytes, ")"));
  }
  if (length > kMaxWireRequestBytes || wire->head_bytes > length ||
      wire->head_bytes > kMaxWireHeadBytes ||
      (method == WireMethod::kPull && length != wire->head_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("a data-plane request of ", length,
                                                   " bytes with a head of ", wire->head_bytes,
                                                   " (at most ", kMaxWireRequestBytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status ParseRequest(const WireRequest& wire, const char* data, uint64_t size,
                          PullRequest* pull, PushRequest* push, std::vector<ConstBytes>* grads) {
  if (wire.head_bytes > size) {
    return absl::InvalidArgumentError(
        absl::StrCat("a data-plane request of ", size, " bytes with a head of ", wire.head_bytes));
  }
  if (static_cast<WireMethod>(wire.method) == WireMethod::kPull) {
    if (!pull->ParseFromArray(data, wire.head_bytes)) {
      return absl::InvalidArgumentError("a data-plane Pull whose PullRequest does not parse");
    }
    return absl::OkStatus();
  }
  if (static_cast<WireMethod>(wire.method) != WireMethod::kPush) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane request method ", wire.method, " carries no Pull or Push"));
  }
  if (!push->ParseFromArray(data, wire.head_bytes)) {
    return absl::InvalidArgumentError("a data-plane Push whose PushRequest does not parse");
  }
  return SplitTensorBytes(*push, data + wire.head_bytes, size - wire.head_bytes, grads);
}

UcxThreadPool::UcxThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      while (true) {
        std::function<void()> fn;
        {
          absl::MutexLock lock(&mu_);
          mu_.Await(absl::Condition(
              +[](UcxThreadPool* p)
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stop_ || !p->queue_.empty(); },
              this));
          if (queue_.empty()) return;
          fn = std::move(queue_.front());
          queue_.pop_front();
        }
        fn();
      }
    });
  }
}

void UcxThreadPool::Run(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

void UcxThreadPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace pstrain
