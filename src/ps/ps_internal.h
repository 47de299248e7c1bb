// Helpers shared by the ParameterServer and its gRPC service (internal to src/ps).
#pragma once

#include "absl/status/status.h"
#include "tensor.pb.h"

namespace pstrain {

// InvalidArgument "request has no sender" unless the request carries a sender with a job.
// `has_sender` is the request's has_sender().
absl::Status CheckSender(bool has_sender, const Sender& sender);

}  // namespace pstrain
