// The interaction's kernels (pairwise_dot.h).
#include "worker/devices/pairwise_dot.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace shardps {

namespace {

void Transpose(const float* v, int64_t rows, int64_t cols, float* t) {  // t[c][r] = v[r][c]
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
}

}  // namespace

// The batch transposed, (n, dim, rows): the inner loop runs over the rows,
// contiguous and independent, so it vectorizes however small n and dim
// are (a dot product of 16 floats per pair does not); each dot product
// still sums over k in order, so the result is the plain loop's bit for bit.
void PairwiseDotCpu(const float* v, int64_t rows, int64_t n, int64_t dim, float* out, int64_t out_stride) {
  const int64_t pairs = n * (n - 1) / 2;
  std::vector<float> vt(static_cast<size_t>(n * dim * rows)), acc(static_cast<size_t>(pairs * rows));
  Transpose(v, rows, n * dim, vt.data());
  float* a = acc.data();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j, a += rows)
      for (int64_t k = 0; k < dim; ++k) {
        const float* x = vt.data() + (i * dim + k) * rows;
        const float* y = vt.data() + (j * dim + k) * rows;
        for (int64_t r = 0; r < rows; ++r) a[r] += x[r] * y[r];
      }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < pairs; ++p) out[r * out_stride + p] = acc.data()[p * rows + r];
}

void PairwiseDotBackwardCpu(const float* v, const float* dz, int64_t dz_stride, int64_t rows, int64_t n,
                            int64_t dim, float* dv) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = r * n * dim;
    const float* vr = v + at;
    const float* g = dz + r * dz_stride;
    float* d = dv + at;
    std::fill(d, d + n * dim, 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j, ++g)
        for (int64_t k = 0; k < dim; ++k) {
          d[i * dim + k] += *g * vr[j * dim + k];
          d[j * dim + k] += *g * vr[i * dim + k];
        }
  }
}

}  // namespace shardps
