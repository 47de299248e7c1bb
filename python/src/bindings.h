// The parts of the module pstrain._pstrain, each defined in a file of its own.
#pragma once

#include <pybind11/pybind11.h>

namespace pstrain::python {

void BindCheckpoint(pybind11::module_& m);  // checkpoint.cc: _load_checkpoint
void BindClient(pybind11::module_& m);      // client.cc: Client
void BindCluster(pybind11::module_& m);     // server.cc: ClusterSpec, cluster_from_tf_config
void BindServer(pybind11::module_& m);      // server.cc: _Server, _server_flag_names

}  // namespace pstrain::python
