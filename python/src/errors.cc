#include "errors.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

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

void RaiseForked(const std::string& what, long parent) {
  py::object error = py::module_::import("pstrain.errors")
                         .attr("ForkedProcessError")(absl::StrCat(
                             what, " was made in process ", parent, " and is used in process ",
                             static_cast<long>(getpid()),
                             ", a child of os.fork(): its thread and connections stayed in the "
                             "parent, so no call can run here; connect again in the child "
                             "(pstrain.Client.connect, as a worker task of its own) and use that "
                             "client there"));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

}  // namespace pstrain::python
