#include "errors.h"

namespace py = pybind11;

namespace pstrain::python {

void Raise(const absl::Status& s) {
  // pstrain.errors builds the exception of the code's class (it is imported by the package
  // before this module, so the import is a lookup).
  py::object error =
      py::module_::import("pstrain.errors")
          .attr("_from_status")(static_cast<int>(s.code()), std::string(s.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

void RaiseInvalidArgument(const std::string& message) {
  Raise(absl::InvalidArgumentError(message));
}

}  // namespace pstrain::python
