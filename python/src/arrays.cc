#include "arrays.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "errors.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

using Float32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Keys = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

// numpy.asarray(obj), or InvalidArgumentError naming `what` and numpy's complaint.
py::array AsArray(py::handle obj, const std::string& what) {
  try {
    return py::module_::import("numpy").attr("asarray")(obj);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_Exception)) throw;
    RaiseInvalidArgument(absl::StrCat(what, ": a ",
                                      std::string(py::str(obj.get_type().attr("__name__"))),
                                      " is not an array: ", e.what()));
  }
}

std::string DtypeName(const py::array& a) { return py::str(a.dtype()); }

// A list or tuple of Python ints (or numpy integer scalars) as keys, which numpy would turn into
// float64 when one is 2^63 or more.
std::vector<uint64_t> IntKeys(const py::sequence& seq, const std::string& what) {
  std::vector<uint64_t> keys;
  keys.reserve(seq.size());
  for (size_t j = 0; j < seq.size(); ++j) {
    const py::object item = seq[j];
    if (PyBool_Check(item.ptr()) || !PyIndex_Check(item.ptr())) {
      RaiseInvalidArgument(
          absl::StrCat(what, " holds ", std::string(py::repr(item)), " at position ", j,
                       ": keys are integers in [0, 2^64) (a uint64 array, or non-negative ints)"));
    }
    const py::int_ key = py::reinterpret_steal<py::int_>(PyNumber_Index(item.ptr()));
    if (key < py::int_(0)) {
      RaiseInvalidArgument(absl::StrCat(what, " has the negative key ",
                                        std::string(py::str(py::handle(key))), " at position ", j,
                                        ": keys are in [0, 2^64)"));
    }
    const unsigned long long k = PyLong_AsUnsignedLongLong(key.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      RaiseInvalidArgument(absl::StrCat(what, " has the key ",
                                        std::string(py::str(py::handle(key))), " at position ", j,
                                        ": keys are in [0, 2^64)"));
    }
    keys.push_back(k);
  }
  return keys;
}

}  // namespace

std::vector<int64_t> ShapeOf(const py::array& a) {
  return std::vector<int64_t>(a.shape(), a.shape() + a.ndim());
}

py::array AsFloat32(py::handle obj, const std::string& what) {
  py::array a =
      py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj) : AsArray(obj, what);
  if (a.dtype().kind() != 'f') {
    RaiseInvalidArgument(absl::StrCat(what, " has dtype ", DtypeName(a),
                                      ": pstrain takes float32 (float16 and float64 are "
                                      "converted; integer, bool, complex and other dtypes are "
                                      "refused)"));
  }
  constexpr int kDirect =
      py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  if (a.dtype().is(py::dtype::of<float>()) && (a.flags() & kDirect) == kDirect) return a;
  return Float32::ensure(a);  // a float32 copy
}

std::vector<uint64_t> AsKeys(py::handle obj, const std::string& what) {
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    return IntKeys(py::reinterpret_borrow<py::sequence>(obj), what);
  }
  py::array a =
      py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj) : AsArray(obj, what);
  if (a.ndim() != 1) {
    RaiseInvalidArgument(
        absl::StrCat(what, " has ", a.ndim(), " dimensions: keys are a 1-D array"));
  }
  std::vector<uint64_t> keys(a.size());
  if (a.size() == 0) return keys;  // [] is float64 to numpy; no keys is fine whatever the dtype
  const char kind = a.dtype().kind();
  if (kind != 'u' && kind != 'i') {
    RaiseInvalidArgument(absl::StrCat(what, " has dtype ", DtypeName(a),
                                      ": keys are unsigned integers (uint64, or non-negative "
                                      "int64 or Python ints)"));
  }
  if (kind == 'i') {
    const py::array_t<int64_t, py::array::c_style | py::array::forcecast> s =
        py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const int64_t* p = s.data();
    for (py::ssize_t j = 0; j < s.size(); ++j) {
      if (p[j] < 0) {
        RaiseInvalidArgument(absl::StrCat(what, " has the negative key ", p[j], " at position ", j,
                                          ": keys are in [0, 2^64)"));
      }
      keys[j] = static_cast<uint64_t>(p[j]);
    }
    return keys;
  }
  const Keys u = Keys::ensure(a);
  std::copy(u.data(), u.data() + u.size(), keys.begin());
  return keys;
}

void ArrayBuffers::Copy(const std::vector<const float*>& src, const std::vector<size_t>& sizes) {
  last_.clear();  // so that a count of 1 below means: no array holds the buffer
  std::vector<Buffer> idle, handed;
  for (Buffer& b : handed_) (b.use_count() == 1 ? idle : handed).push_back(std::move(b));
  // The last array let go of an idle buffer on a Python thread: its reads come before the
  // writes here.
  std::atomic_thread_fence(std::memory_order_acquire);
  for (size_t i = 0; i < src.size(); ++i) {
    auto same = std::find_if(idle.begin(), idle.end(),
                             [&](const Buffer& b) { return b->size() == sizes[i]; });
    Buffer b;
    if (same != idle.end()) {
      b = std::move(*same);
      idle.erase(same);
    } else {
      b = std::make_shared<std::vector<float>>(sizes[i]);
    }
    if (sizes[i] > 0) std::memcpy(b->data(), src[i], sizes[i] * sizeof(float));
    last_.push_back(b);
    handed.push_back(std::move(b));
  }
  handed_ = std::move(handed);
}

py::array Own(const ArrayBuffers::Buffer& buffer, const std::vector<int64_t>& shape) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  if (buffer->empty()) return py::array_t<float>(dims);  // no values to own
  py::capsule base(new ArrayBuffers::Buffer(buffer),
                   [](void* p) { delete static_cast<ArrayBuffers::Buffer*>(p); });
  return py::array_t<float>(dims, buffer->data(), base);
}

}  // namespace pstrain::python
