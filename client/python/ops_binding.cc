// shardps.torch.pairwise_dot's binding: the DLRM interaction (every pair
// i < j of a row's n vectors, their dot product) and its backward, in
// shardps-worker's CPU kernels (worker/devices/pairwise_dot.h), on NumPy
// arrays that share the tensors' memory, without the GIL. In PyTorch 1.13
// the same through torch.bmm and an index costs a small matrix product per
// example and a scatter in backward (docs/performance.md).
#include "client/python/ops_binding.h"

#include <pybind11/numpy.h>

#include <string>

#include "worker/devices/pairwise_dot.h"

namespace py = pybind11;

namespace shardps::python {

namespace {

using Floats = py::array_t<float, py::array::c_style>;

// The (rows, n, dim) of v, checked against out's (rows, n (n - 1) / 2).
void CheckShapes(const Floats& v, const Floats& pairs, const char* what) {
  if (v.ndim() != 3) throw py::value_error(std::string(what) + ": v must be (batch, n, dim)");
  const py::ssize_t rows = v.shape(0), n = v.shape(1);
  if (pairs.ndim() != 2 || pairs.shape(0) != rows || pairs.shape(1) != n * (n - 1) / 2)
    throw py::value_error(std::string(what) + ": the pairs must be (batch, n (n - 1) / 2) = (" +
                          std::to_string(rows) + ", " + std::to_string(n * (n - 1) / 2) + ")");
}

void PairwiseDot(const Floats& v, Floats& out) {
  CheckShapes(v, out, "pairwise_dot");
  const float* in = v.data();
  float* o = out.mutable_data();
  py::gil_scoped_release nogil;
  PairwiseDotCpu(in, v.shape(0), v.shape(1), v.shape(2), o, out.shape(1));
}

void PairwiseDotBackward(const Floats& v, const Floats& dz, Floats& dv) {
  CheckShapes(v, dz, "pairwise_dot_backward");
  if (dv.ndim() != 3 || dv.shape(0) != v.shape(0) || dv.shape(1) != v.shape(1) || dv.shape(2) != v.shape(2))
    throw py::value_error("pairwise_dot_backward: dv must have v's shape");
  const float* in = v.data();
  const float* g = dz.data();
  float* d = dv.mutable_data();
  py::gil_scoped_release nogil;
  PairwiseDotBackwardCpu(in, g, dz.shape(1), v.shape(0), v.shape(1), v.shape(2), d);
}

}  // namespace

void BindOps(py::module_& m) {
  m.def("pairwise_dot", &PairwiseDot, py::arg("v"), py::arg("out").noconvert(),
        "out[r, p] = <v[r, i], v[r, j]> for the pairs i < j in row-major order (torch.triu_indices(n, n, 1))");
  m.def("pairwise_dot_backward", &PairwiseDotBackward, py::arg("v"), py::arg("dz"), py::arg("dv").noconvert(),
        "dv = the gradient of pairwise_dot(v) given dz, the gradient of its pairs");
}

}  // namespace shardps::python
