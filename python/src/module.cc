// pstrain._pstrain: the C++ client and runtime for the Python package pstrain.
#include "bindings.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

PYBIND11_MODULE(_pstrain, m) {
  m.doc() = "pstrain's C++ client and servers; use the package pstrain, not this module.";
  // Logs go to stderr, as the pstrain command's do: a chief's stdout carries its result line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("pstrain"));
  pstrain::python::BindCluster(m);
  pstrain::python::BindServer(m);
  pstrain::python::BindClient(m);
  pstrain::python::BindCheckpoint(m);
}
