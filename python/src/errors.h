// absl::Status as Python exceptions: one class of pstrain.errors per status code, the message
// the C++ status message.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain::python {

// Sets the Python error for `s` (not OK) and throws pybind11::error_already_set.
[[noreturn]] void Raise(const absl::Status& s);
// Raise(InvalidArgumentError(message)).
[[noreturn]] void RaiseInvalidArgument(const std::string& message);
// Raises pstrain.errors.ForkedProcessError: `what` ("pstrain.Client"), made in process
// `parent`, is used in this process, a child of fork().
[[noreturn]] void RaiseForked(const std::string& what, long parent);

inline void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) Raise(s);
}
template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return *std::move(v);
}

}  // namespace pstrain::python
