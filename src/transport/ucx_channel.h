// The UCX DataChannel's parts (ucx.h MakeUcxDataChannel): the calls' path out in ucx.cc, the
// responses' path back in ucx_channel_recv.cc. Internal to src/transport.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "transport/transport.h"
#include "transport/ucx_call.h"
#include "transport/ucx_wire.h"
#include "transport/ucx_worker.h"

namespace pstrain::ucx_internal {

inline constexpr absl::Duration kConnectTimeout = absl::Seconds(10);
// A call past its deadline whose bytes UCX still moves is given this long before the channel's
// connection is torn down to end it (the next call connects again).
inline constexpr absl::Duration kAbandonGrace = absl::Seconds(2);

class UcxChannel;

struct ClientCall {
  UcxChannel* owner = nullptr;
  uint64_t id = 0;
  WireMethod method = WireMethod::kPush;
  absl::Time deadline;
  CallCanceller* canceller = nullptr;
  DoneFn done;
  PushResponse* push_resp = nullptr;
  PullResponse* pull_resp = nullptr;
  std::vector<MutableBytes> dest;
  std::string header;  // WireRequest + token
  std::string head;
  std::vector<ConstBytes> grads;
  std::vector<ucp_dt_iov_t> send_iov;
  void* send_req = nullptr;  // UCX requests still reading or writing the caller's buffers
  void* recv_req = nullptr;
  bool answered = false;  // the response arrived and was read
  bool failed = false;    // `result` is final (an error, a deadline, a cancel)
  absl::Status result;
  WireResponse wire;
  std::string meta;  // status message + response head; the whole data when sizes disagree
  bool scratch = false;
  std::vector<ucp_dt_iov_t> recv_iov;

  const char* what() const {
    return method == WireMethod::kPush ? "Push" : method == WireMethod::kPull ? "Pull" : "Connect";
  }
  void Fail(absl::Status s) {
    if (answered || failed) return;
    failed = true;
    result = std::move(s);
  }
};

class UcxChannel final : public DataChannel {
 public:
  // `ps_worker` is the PS's worker address from its DataPlane answer.
  UcxChannel(std::string address, std::string ps_worker, std::unique_ptr<UcxWorker> worker)
      : address_(std::move(address)),
        ps_worker_(std::move(ps_worker)),
        worker_(std::move(worker)),
        token_(GetSecurity()->token) {}
  ~UcxChannel() override;

  absl::Status Connect();
  void Push(const CallOptions& options, const PushRequest& head, std::vector<ConstBytes> grads,
            PushResponse* resp, DoneFn done) override;
  void Pull(const CallOptions& options, const PullRequest& req, std::vector<MutableBytes> dest,
            PullResponse* resp, DoneFn done) override;
  const char* name() const override { return "ucx"; }

 private:
  absl::Status Error(const ClientCall& c, absl::StatusCode code, absl::string_view msg) const {
    return absl::Status(code, absl::StrCat(c.what(), " at ", address_, " (UCX): ", msg));
  }
  void Prepare(ClientCall* call) const;
  void Submit(std::unique_ptr<ClientCall> call, const CallOptions& options);
  absl::Status EnsureEp(DoneFn hello_done = [](absl::Status) {});
  void Start(std::unique_ptr<ClientCall> call);
  void MaybeFinish(ClientCall* call);
  void Expire(ClientCall* call);
  static ucs_status_t OnResponse(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  void Received(ClientCall* call, ucs_status_t status);
  void Tick();
  void FailAll(const absl::Status& why);
  void CloseEp();

  const std::string address_, ps_worker_;
  std::unique_ptr<UcxWorker> worker_;
  // Runs the calls' `done` in order, off the progress thread, so that a `done` that makes
  // another call on this channel and waits for it does not stall the thread that would end it.
  UcxThreadPool dones_{1};
  const std::string token_;
  // Progress thread only.
  ucp_ep_h ep_ = nullptr;
  uint64_t conn_ = 0;  // ep_'s name at the PS (WireRequest::conn), random per endpoint
  bool ep_failed_ = false;
  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<ClientCall>> calls_;
};

}  // namespace pstrain::ucx_internal
