// Internal to src/master: checks of what a user asks the chief for (an optimizer, a variable's
// spec), before anything is allocated or sent. Messages name the field as the user wrote it: a
// command-line flag ("--lr") or a field of the request ("optimizer.learning_rate").
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/optimizer_config.h"
#include "master.pb.h"
#include "master/variables.h"

namespace pstrain {

// The `pstrain launch` flag that sets a field ("learning_rate" -> "--lr").
std::string FlagName(absl::string_view field);

// The variable a client program asks for, checked: a name of 1 to kMaxNameBytes bytes, a valid
// initializer, a partitioner text of at most kMaxNameBytes, and an optimizer that is either
// absent (the job's `default_optimizer` is used) or complete and valid; one with fields set but
// no name is refused. The shape is checked by VariablePlacer, before the value is drawn.
absl::StatusOr<NewVariable> VariableFromSpec(const VariableSpec& spec,
                                             const OptimizerConfig& default_optimizer);

}  // namespace pstrain
