// Compute kernels for shardps.torch (ops_binding.cc), bound into the
// _shardps module by module.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace shardps::python {

// Binds pairwise_dot and pairwise_dot_backward into `m`.
void BindOps(pybind11::module_& m);

}  // namespace shardps::python
