// The data plane's server end over a ParameterServer (ps.h MakeDataHandler).

#include <memory>
#include <utility>

#include "ps/ps.h"

namespace pstrain {
namespace {

class PsDataHandler final : public DataHandler {
 public:
  explicit PsDataHandler(ParameterServer* ps) : ps_(ps) {}

  void Push(const PushRequest& head, absl::Span<const ConstBytes> grads, PushResponse* resp,
            DoneFn done) override {
    ps_->AfterFreeze(
        [this, &head, grads, resp, done = std::move(done)] { done(ps_->Push(head, grads, resp)); });
  }

  void Pull(const PullRequest& req, PullResponse* resp, PullSink sink, DoneFn done) override {
    ps_->PullAsync(req, resp, std::move(sink), std::move(done));
  }

  absl::StatusOr<int64_t> VariableBytes(const std::string& name) override {
    return ps_->VariableBytes(name);
  }

 private:
  ParameterServer* const ps_;
};

}  // namespace

std::unique_ptr<DataHandler> MakeDataHandler(ParameterServer* ps) {
  return std::make_unique<PsDataHandler>(ps);
}

}  // namespace pstrain
