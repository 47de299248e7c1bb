// numpy arrays in and out of the client: the dtype and contiguity rule of pushes, keys of
// tables, and arrays that view the client's buffers.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
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

// A float32 array of `shape` over `data` (not copied), which `base` keeps alive.
pybind11::array View(const float* data, const std::vector<int64_t>& shape, pybind11::handle base);

// The shape of `a`.
std::vector<int64_t> ShapeOf(const pybind11::array& a);

}  // namespace pstrain::python
