#include "common/codec/compress.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <functional>
#include <string>
#include <vector>

namespace shardps::compress {

size_t TopKCount(size_t n, float fraction) {
  if (n == 0) return 0;
  const double k = std::ceil(static_cast<double>(fraction) * static_cast<double>(n));
  return std::clamp<size_t>(static_cast<size_t>(k), 1, n);
}

size_t EncodedBytes(Compression kind, size_t n, size_t k) {
  switch (kind) {
    case Compression::kTopK: return 4 + 8 * k;
    case Compression::kSign: return 4 + (n + 7) / 8;
    case Compression::kNone: break;
  }
  return n * sizeof(float);
}

namespace {

// |x|, NaN as the largest (a NaN is sent, not kept).
inline float Mag(float x) { return std::isnan(x) ? std::numeric_limits<float>::infinity() : std::fabs(x); }

// e = g + residual (in place) and its top-k.
void EncodeTopK(const float* g, float* e, size_t n, size_t k, uint8_t* out) {
  // The k largest |e|, ties to the lower index, sent in index order. A
  // threshold under the k-th largest magnitude from a strided sample
  // (aiming at twice k's share); one pass over e that adds g and takes the
  // entries at or above the threshold as candidates, by index; the exact
  // k-th largest among the candidates (a few thousand values, not n); the
  // candidates above it (and the first ties) are sent. When fewer than k
  // reach the sampled threshold, every entry is a candidate.
  thread_local std::vector<float> sample, cand_mag;
  thread_local std::vector<uint32_t> cand;
  cand.clear();
  float low = 0;
  if (k > 0 && k < n) {
    const size_t m = std::min<size_t>(n, 4096), stride = n / m;
    sample.resize(m);
    for (size_t i = 0; i < m; ++i) sample[i] = Mag(e[i * stride] + g[i * stride]);
    const size_t at = std::min(m - 1, static_cast<size_t>(2.0 * static_cast<double>(k) * m / n) + 1);
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(at), sample.end(),
                     std::greater<float>());
    low = sample[at];
  }
  for (size_t i = 0; i < n; ++i) {
    e[i] += g[i];
    if (Mag(e[i]) >= low && k > 0) cand.push_back(static_cast<uint32_t>(i));
  }
  if (cand.size() < k) {  // every entry
    cand.resize(n);
    std::iota(cand.begin(), cand.end(), 0u);
  }
  // The k-th largest among the candidates, and how many equal to it go.
  float kth = -1.0f;
  size_t ties = 0;
  if (k > 0 && k < cand.size()) {
    cand_mag.resize(cand.size());
    for (size_t j = 0; j < cand.size(); ++j) cand_mag[j] = Mag(e[cand[j]]);
    std::nth_element(cand_mag.begin(), cand_mag.begin() + static_cast<std::ptrdiff_t>(k - 1), cand_mag.end(),
                     std::greater<float>());
    kth = cand_mag[k - 1];
    size_t above = 0;
    for (const uint32_t i : cand) above += Mag(e[i]) > kth;
    ties = k - above;
  }
  const uint32_t k32 = static_cast<uint32_t>(k);
  std::memcpy(out, &k32, 4);
  uint8_t* ip = out + 4;
  uint8_t* vp = out + 4 + 4 * k;
  size_t j = 0;
  for (size_t c = 0; c < cand.size() && j < k; ++c) {
    const uint32_t i = cand[c];
    const float m = Mag(e[i]);
    if (m > kth || (m == kth && ties > 0 && ties--)) {
      std::memcpy(ip + 4 * j, &i, 4);
      std::memcpy(vp + 4 * j, &e[i], 4);
      e[i] = 0.0f;  // sent: nothing of it stays behind
      ++j;
    }
  }
}

void EncodeSign(float* e, size_t n, uint8_t* out) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::fabs(e[i]);
  const float scale = n ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
  std::memcpy(out, &scale, 4);
  uint8_t* bits = out + 4;
  // Bit i: e_i is not negative (+0 counts as plus); the residual keeps
  // e_i - scale x sign(e_i). Branch-free, so the compiler vectorizes it.
  for (size_t b = 0; b < (n + 7) / 8; ++b) {
    uint32_t byte = 0;
    const size_t first = 8 * b, count = std::min<size_t>(8, n - first);
    for (size_t j = 0; j < count; ++j) {
      uint32_t u;
      std::memcpy(&u, &e[first + j], 4);
      byte |= ((u >> 31) ^ 1u) << j;
    }
    bits[b] = static_cast<uint8_t>(byte);
  }
  for (size_t i = 0; i < n; ++i) e[i] -= std::copysign(scale, e[i]);
}

// The 8 signs (+1/-1) of each byte value, bit j for the j-th value.
struct SignTable {
  float v[256][8];
  SignTable() {
    for (int b = 0; b < 256; ++b)
      for (int j = 0; j < 8; ++j) v[b][j] = (b >> j) & 1 ? 1.0f : -1.0f;
  }
};

}  // namespace

void Encode(Compression kind, const float* g, float* residual, size_t n, size_t k, void* out) {
  auto* o = static_cast<uint8_t*>(out);
  if (kind == Compression::kTopK) return EncodeTopK(g, residual, n, k, o);  // (adds g in its pass)
  for (size_t i = 0; i < n; ++i) residual[i] += g[i];  // e = g + residual, in place
  switch (kind) {
    case Compression::kTopK: break;
    case Compression::kSign: EncodeSign(residual, n, o); break;
    case Compression::kNone:
      std::memcpy(o, residual, n * sizeof(float));
      std::fill(residual, residual + n, 0.0f);
      break;
  }
}

Status Check(Compression kind, const void* frame, size_t bytes, size_t n) {
  const auto* f = static_cast<const uint8_t*>(frame);
  switch (kind) {
    case Compression::kTopK: {
      uint32_t k = 0;
      if (bytes >= 4) std::memcpy(&k, f, 4);
      if (bytes < 4 || bytes != 4 + 8 * static_cast<uint64_t>(k))
        return Status::BadMessage("top-k frame of " + std::to_string(bytes) + " bytes" +
                                  (bytes >= 4 ? " announcing " + std::to_string(k) + " values (that is " +
                                                    std::to_string(4 + 8 * static_cast<uint64_t>(k)) + " bytes)"
                                              : ""));
      if (k > n)
        return Status::BadMessage("top-k frame of " + std::to_string(k) + " values for a part of " +
                                  std::to_string(n));
      for (uint32_t j = 0; j < k; ++j) {
        uint32_t i;
        std::memcpy(&i, f + 4 + 4 * static_cast<size_t>(j), 4);
        if (i >= n)
          return Status::BadMessage("top-k index " + std::to_string(i) + " past the " + std::to_string(n) +
                                    " values of the part");
      }
      return Status::OK();
    }
    case Compression::kSign:
      if (bytes != 4 + (n + 7) / 8)
        return Status::BadMessage("sign frame of " + std::to_string(bytes) + " bytes for " + std::to_string(n) +
                                  " values (that is " + std::to_string(4 + (n + 7) / 8) + " bytes)");
      return Status::OK();
    case Compression::kNone: break;
  }
  if (bytes != n * sizeof(float))
    return Status::BadMessage("values frame of " + std::to_string(bytes) + " bytes for " + std::to_string(n) +
                              " float32 values");
  return Status::OK();
}

Status Decode(Compression kind, const void* frame, size_t bytes, size_t n, float* out) {
  SHARDPS_RETURN_IF_ERROR(Check(kind, frame, bytes, n));
  const auto* f = static_cast<const uint8_t*>(frame);
  switch (kind) {
    case Compression::kTopK: {
      uint32_t k;
      std::memcpy(&k, f, 4);
      std::fill(out, out + n, 0.0f);
      for (uint32_t j = 0; j < k; ++j) {
        uint32_t i;
        float v;
        std::memcpy(&i, f + 4 + 4 * static_cast<size_t>(j), 4);
        std::memcpy(&v, f + 4 + 4 * static_cast<size_t>(k) + 4 * static_cast<size_t>(j), 4);
        out[i] += v;
      }
      return Status::OK();
    }
    case Compression::kSign: {
      float scale;
      std::memcpy(&scale, f, 4);
      const uint8_t* bits = f + 4;
      static const SignTable table;
      size_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const float* s = table.v[bits[i / 8]];
        for (size_t j = 0; j < 8; ++j) out[i + j] = scale * s[j];
      }
      for (; i < n; ++i) out[i] = (bits[i / 8] >> (i % 8)) & 1 ? scale : -scale;
      return Status::OK();
    }
    case Compression::kNone: break;
  }
  std::memcpy(out, frame, bytes);
  return Status::OK();
}

}  // namespace shardps::compress
