// The check of an embedding table's initializer (internal to src/ps; InitialRow itself is
// declared in embedding_table.h).
#pragma once

#include "absl/status/status.h"
#include "ps.pb.h"

namespace pstrain {

// InvalidArgument naming the field ("initializer.kind", "initializer.low", ...) unless `init`
// is one InitialRow can draw: kind "" (zeros), zeros, constant (finite value), uniform (finite
// low < high), normal or truncated_normal (finite mean, finite stddev > 0). glorot_uniform is
// refused: a row has no fan-in.
absl::Status ValidateRowInitializer(const InitializerDef& init);

}  // namespace pstrain
