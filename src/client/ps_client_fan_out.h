// What both halves of PsClient use (internal to src/client): ps_client.cc pulls, ps_client_push.cc
// pushes, and each fans its batches out to the PS with PsClient::FanOut.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/ps_client.h"

namespace pstrain {
namespace ps_client_internal {

// The elements of one row of a variable of `shape` (1 for a scalar or a vector).
inline int64_t RowSize(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// `s` naming PS task `peer` ("Pull at ps:1 127.0.0.1:2222: ...") as PsPeers' errors do: a
// channel names only the address it was made for.
inline absl::Status NamePs(absl::Status s, const char* what, const std::string& address,
                           const std::string& peer) {
  absl::string_view m = s.message();
  absl::ConsumePrefix(&m, absl::StrCat(what, " at ", address, ": "));
  return absl::Status(s.code(), absl::StrCat(what, " at ", peer, ": ", m));
}

}  // namespace ps_client_internal

template <typename Call>
absl::Status PsClient::FanOut(const char* what, bool retry, const std::vector<size_t>& which,
                              Call call) {
  if (absl::Status s = MakeChannels(); !s.ok()) return s;
  CallOptions options;
  options.deadline = absl::Now() + peers_.timeout();
  options.wait_for_ready = true;  // a PS still connecting (or reconnecting) is waited for
  options.canceller = peers_.canceller();
  return FanOutCalls(what, which.size(), retry, options.deadline, options.canceller,
                     [&](size_t j, auto done) {
                       const size_t b = which[j];
                       const int ps = batches_[b].ps;
                       call(channels_[ps].get(), options, b,
                            [this, what, ps, done = std::move(done)](absl::Status s) {
                              if (!s.ok())
                                s = ps_client_internal::NamePs(
                                    std::move(s), what, peers_.address(ps), peers_.PeerName(ps));
                              done(std::move(s));
                            });
                     });
}

}  // namespace pstrain
