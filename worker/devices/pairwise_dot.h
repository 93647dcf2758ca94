// DLRM's interaction on the CPU: for each row of n vectors of `dim`
// floats, every pair i < j's dot product, in row-major pair order (i, then
// j), and its backward. Plain functions with no dependencies: the CPU
// device (cpu_device.cc) and the Python module's shardps.torch.pairwise_dot
// (client/python/ops_binding.cc) both run them.
#pragma once

#include <cstdint>

namespace shardps {

// out[r * out_stride + p] = <v[r][i], v[r][j]> for the p-th pair i < j;
// v is rows x n x dim, contiguous. Each dot product sums over k in order.
void PairwiseDotCpu(const float* v, int64_t rows, int64_t n, int64_t dim, float* out, int64_t out_stride);

// dv[r][i] = sum over j != i of dz[r * dz_stride + pair(i, j)] * v[r][j];
// dv is rows x n x dim, overwritten.
void PairwiseDotBackwardCpu(const float* v, const float* dz, int64_t dz_stride, int64_t rows, int64_t n,
                            int64_t dim, float* dv);

}  // namespace shardps
