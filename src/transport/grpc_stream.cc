#include "transport/grpc_stream.h"

namespace pstrain {

void StreamPush(grpc::Channel*, const std::string& peer, const CallOptions&, const PushRequest&,
                std::vector<ConstBytes>, PushResponse*, DoneFn done) {
  done(absl::UnimplementedError("chunked pushes are not built yet (" + peer + ")"));
}

void StreamPull(grpc::Channel*, const std::string& peer, const CallOptions&, const PullRequest&,
                std::vector<MutableBytes>, PullResponse*, DoneFn done) {
  done(absl::UnimplementedError("chunked pulls are not built yet (" + peer + ")"));
}

std::unique_ptr<grpc::Service> MakeTensorStreamService(DataHandler*) { return nullptr; }

}  // namespace pstrain
