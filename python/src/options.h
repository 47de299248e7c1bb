// The optimizer and initializer objects of pstrain.optim and pstrain.init as the client's
// options. Each object's _options() returns a dict of the C++ structs' field names.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "client/client.h"

namespace pstrain::python {

// None: unset (the chief's optimizer for a variable, a table's default).
std::optional<OptimizerOptions> ToOptimizer(pybind11::handle optimizer);
// None: zeros.
InitializerOptions ToInitializer(pybind11::handle initializer);

}  // namespace pstrain::python
