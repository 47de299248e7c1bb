// Internal to src/client: the public option structs of client.h in their wire form.
#pragma once

#include "client/client.h"
#include "master.pb.h"
#include "ps.pb.h"

namespace pstrain {

OptimizerConfig ToProto(const OptimizerOptions& o);

}  // namespace pstrain
