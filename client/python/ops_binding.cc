// shardps.torch.pairwise_dot's kernels: the DLRM interaction (every pair
// i < j of a row's n vectors, their dot product) and its backward, as
// shardps-worker's CPU device computes them (worker/devices/cpu_device.cc),
// on NumPy arrays that share the tensors' memory, without the GIL. In
// PyTorch 1.13 the same through torch.bmm and an index costs a small
// matrix product per example and a scatter in backward (docs/performance.md).
#include "client/python/ops_binding.h"

#include <pybind11/numpy.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

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

// The forward works on the batch transposed, (n, dim, rows): its inner
// loop runs over the rows, contiguous and independent, so it vectorizes
// however small n and dim are; each dot product still sums over k in order.
void Transpose(const float* v, py::ssize_t rows, py::ssize_t cols, float* t) {  // t[c][r] = v[r][c]
  for (py::ssize_t r = 0; r < rows; ++r)
    for (py::ssize_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
}

void PairwiseDot(const Floats& v, Floats& out) {
  CheckShapes(v, out, "pairwise_dot");
  const py::ssize_t rows = v.shape(0), n = v.shape(1), dim = v.shape(2), pairs = out.shape(1);
  const float* in = v.data();
  float* o = out.mutable_data();
  py::gil_scoped_release nogil;
  std::vector<float> vt(static_cast<size_t>(n * dim * rows)), ot(static_cast<size_t>(pairs * rows));
  Transpose(in, rows, n * dim, vt.data());
  float* acc = ot.data();
  for (py::ssize_t i = 0; i < n; ++i)
    for (py::ssize_t j = i + 1; j < n; ++j, acc += rows) {
      for (py::ssize_t k = 0; k < dim; ++k) {
        const float* a = vt.data() + (i * dim + k) * rows;
        const float* b = vt.data() + (j * dim + k) * rows;
        for (py::ssize_t r = 0; r < rows; ++r) acc[r] += a[r] * b[r];
      }
    }
  Transpose(ot.data(), pairs, rows, o);
}

void PairwiseDotBackward(const Floats& v, const Floats& dz, Floats& dv) {
  CheckShapes(v, dz, "pairwise_dot_backward");
  if (dv.ndim() != 3 || dv.shape(0) != v.shape(0) || dv.shape(1) != v.shape(1) || dv.shape(2) != v.shape(2))
    throw py::value_error("pairwise_dot_backward: dv must have v's shape");
  const py::ssize_t rows = v.shape(0), n = v.shape(1), dim = v.shape(2);
  const float* in = v.data();
  const float* g = dz.data();
  float* d = dv.mutable_data();
  py::gil_scoped_release nogil;
  // Per row, dz as a symmetric n x n matrix (0 on the diagonal): dv[i] is
  // the sum over j of dz(i, j) v[j], its inner loop over dim.
  std::vector<float> sym(static_cast<size_t>(n * n));
  for (py::ssize_t r = 0; r < rows; ++r) {
    for (py::ssize_t i = 0; i < n; ++i) {
      sym[i * n + i] = 0.0f;
      for (py::ssize_t j = i + 1; j < n; ++j, ++g) sym[i * n + j] = sym[j * n + i] = *g;
    }
    const float* vr = in + r * n * dim;
    float* dr = d + r * n * dim;
    for (py::ssize_t i = 0; i < n; ++i) {
      float* di = dr + i * dim;
      for (py::ssize_t k = 0; k < dim; ++k) di[k] = 0.0f;
      for (py::ssize_t j = 0; j < n; ++j) {
        const float gij = sym[i * n + j];
        const float* vj = vr + j * dim;
        for (py::ssize_t k = 0; k < dim; ++k) di[k] += gij * vj[k];
      }
    }
  }
}

}  // namespace

void BindOps(py::module_& m) {
  m.def("pairwise_dot", &PairwiseDot, py::arg("v"), py::arg("out").noconvert(),
        "out[r, p] = <v[r, i], v[r, j]> for the pairs i < j in row-major order (torch.triu_indices(n, n, 1))");
  m.def("pairwise_dot_backward", &PairwiseDotBackward, py::arg("v"), py::arg("dz"), py::arg("dv").noconvert(),
        "dv = the gradient of pairwise_dot(v) given dz, the gradient of its pairs");
}

}  // namespace shardps::python
