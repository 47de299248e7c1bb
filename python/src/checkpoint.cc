// pstrain._pstrain._load_checkpoint: a checkpoint's parameters as numpy arrays, for
// pstrain.load_checkpoint (python/pstrain/checkpoint.py).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "arrays.h"
#include "bindings.h"
#include "client/client.h"
#include "errors.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

// (path, global_step, [(name, values)], [(name, keys, rows)]): values of each variable's
// shape, keys uint64 of shape (n,), rows float32 of shape (n, dim). The arrays own their memory.
py::tuple LoadCheckpoint(const std::string& path) {
  absl::StatusOr<CheckpointParameters> read;
  {
    py::gil_scoped_release release;  // reading and checking every part takes a while
    read = ReadCheckpoint(path);
  }
  CheckpointParameters c = ValueOrThrow(std::move(read));
  py::list variables, tables;
  for (CheckpointParameters::Variable& v : c.variables) {
    variables.append(py::make_tuple(
        v.name, Own(std::make_shared<std::vector<float>>(std::move(v.values)), v.shape)));
  }
  for (CheckpointParameters::Table& t : c.tables) {
    const auto n = static_cast<int64_t>(t.keys.size());
    py::array_t<uint64_t> keys(n);
    if (n > 0) std::memcpy(keys.mutable_data(), t.keys.data(), t.keys.size() * sizeof(uint64_t));
    tables.append(py::make_tuple(
        t.name, keys, Own(std::make_shared<std::vector<float>>(std::move(t.rows)), {n, t.dim})));
  }
  return py::make_tuple(c.path, c.global_step, variables, tables);
}

}  // namespace

void BindCheckpoint(py::module_& m) {
  m.def("_load_checkpoint", &LoadCheckpoint, py::arg("path"),
        "A checkpoint's parameters: use pstrain.load_checkpoint.");
}

}  // namespace pstrain::python
