// numpy arrays in and out of the client: the dtype and contiguity rule of pushes, keys of
// tables, and the buffers that pulled arrays own.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain::python {

// `obj` (a numpy array or anything numpy.asarray takes: the buffer protocol, __array__,
// sequences) as a float32 C-contiguous aligned array in native byte order: `obj` itself when it
// is one (no copy), else a float32 copy of a floating-point array (float16, float64, ...; other
// byte orders, non-contiguous views). InvalidArgumentError naming `what` and the dtype for
// anything else (integers, bool, complex, objects, strings): bytes are never reinterpreted.
pybind11::array AsFloat32(pybind11::handle obj, const std::string& what);

// `obj` as one table's keys: a 1-D array or sequence of integers in [0, 2^64); unsigned arrays
// are taken as they are, signed ones (and Python ints) must hold no negative key.
// InvalidArgumentError naming `what` otherwise.
std::vector<uint64_t> AsKeys(pybind11::handle obj, const std::string& what);

// Floats that numpy arrays own. Every array made by Own holds a reference to its buffer in its
// base, so the memory lives as long as the array or any view of it, whatever the client does
// next (a create_variable frees the C++ client's buffers). A buffer no array holds any more is
// filled again by a later Copy, so a loop of pulls allocates nothing after its first two.
class ArrayBuffers {
 public:
  using Buffer = std::shared_ptr<std::vector<float>>;
  // Copies src[i] (sizes[i] floats) into buffers no array holds: buffers of earlier calls whose
  // arrays are all gone, or new ones; idle buffers left over are freed. Touches no Python
  // object: called on the client's thread, without the GIL.
  void Copy(const std::vector<const float*>& src, const std::vector<size_t>& sizes);
  // The buffers of the last Copy, in order.
  const std::vector<Buffer>& last() const { return last_; }

 private:
  std::vector<Buffer> handed_;  // to arrays, which may still hold them
  std::vector<Buffer> last_;
};

// A float32 array of `shape` over `buffer`'s floats; its base (a capsule) owns a reference to
// `buffer`.
pybind11::array Own(const ArrayBuffers::Buffer& buffer, const std::vector<int64_t>& shape);

// The shape of `a`.
std::vector<int64_t> ShapeOf(const pybind11::array& a);

}  // namespace pstrain::python
