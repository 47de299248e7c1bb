// Helpers shared by the ParameterServer, its consistency rules and its gRPC service (internal to
// src/ps).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tensor.pb.h"

namespace pstrain {

// InvalidArgument "request has no sender" unless the request carries a sender with a job.
// `has_sender` is the request's has_sender().
absl::Status CheckSender(bool has_sender, const Sender& sender);

// `name` in single quotes for a message; a name over kMaxNameBytes shows only its start and its
// length, so a message never grows with what a request sent.
std::string Quoted(absl::string_view name);

// "worker:1 (incarnation 7)", with the job and task shortened as Quoted does.
std::string SenderString(const Sender& s);

}  // namespace pstrain
