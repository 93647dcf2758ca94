#include "common/compress.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
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

void EncodeTopK(float* e, size_t n, size_t k, uint8_t* out) {
  // The k largest |e|, ties to the lower index; sent in index order.
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  // NaN counts as the largest (a strict weak order; and it is sent, not kept).
  auto mag = [&](uint32_t i) { return std::isnan(e[i]) ? std::numeric_limits<float>::infinity() : std::fabs(e[i]); };
  auto larger = [&](uint32_t a, uint32_t b) {
    const float fa = mag(a), fb = mag(b);
    return fa > fb || (fa == fb && a < b);
  };
  if (k < n) std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), larger);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  const uint32_t k32 = static_cast<uint32_t>(k);
  std::memcpy(out, &k32, 4);
  uint8_t* ip = out + 4;
  uint8_t* vp = out + 4 + 4 * k;
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(ip + 4 * j, &idx[j], 4);
    std::memcpy(vp + 4 * j, &e[idx[j]], 4);
    e[idx[j]] = 0.0f;  // sent: nothing of it stays behind
  }
}

void EncodeSign(float* e, size_t n, uint8_t* out) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::fabs(e[i]);
  const float scale = n ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
  std::memcpy(out, &scale, 4);
  uint8_t* bits = out + 4;
  std::memset(bits, 0, (n + 7) / 8);
  for (size_t i = 0; i < n; ++i) {
    const bool plus = !std::signbit(e[i]);
    if (plus) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    e[i] -= plus ? scale : -scale;
  }
}

}  // namespace

void Encode(Compression kind, const float* g, float* residual, size_t n, size_t k, void* out) {
  for (size_t i = 0; i < n; ++i) residual[i] += g[i];  // e = g + residual, in place
  auto* o = static_cast<uint8_t*>(out);
  switch (kind) {
    case Compression::kTopK: EncodeTopK(residual, n, k, o); break;
    case Compression::kSign: EncodeSign(residual, n, o); break;
    case Compression::kNone:
      std::memcpy(o, residual, n * sizeof(float));
      std::fill(residual, residual + n, 0.0f);
      break;
  }
}

Status Decode(Compression kind, const void* frame, size_t bytes, size_t n, float* out) {
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
      std::fill(out, out + n, 0.0f);
      for (uint32_t j = 0; j < k; ++j) {
        uint32_t i;
        float v;
        std::memcpy(&i, f + 4 + 4 * static_cast<size_t>(j), 4);
        std::memcpy(&v, f + 4 + 4 * static_cast<size_t>(k) + 4 * static_cast<size_t>(j), 4);
        if (i >= n)
          return Status::BadMessage("top-k index " + std::to_string(i) + " past the " + std::to_string(n) +
                                    " values of the part");
        out[i] += v;
      }
      return Status::OK();
    }
    case Compression::kSign: {
      if (bytes != 4 + (n + 7) / 8)
        return Status::BadMessage("sign frame of " + std::to_string(bytes) + " bytes for " + std::to_string(n) +
                                  " values (that is " + std::to_string(4 + (n + 7) / 8) + " bytes)");
      float scale;
      std::memcpy(&scale, f, 4);
      const uint8_t* bits = f + 4;
      for (size_t i = 0; i < n; ++i) out[i] = (bits[i / 8] >> (i % 8)) & 1 ? scale : -scale;
      return Status::OK();
    }
    case Compression::kNone: break;
  }
  if (bytes != n * sizeof(float))
    return Status::BadMessage("values frame of " + std::to_string(bytes) + " bytes for " + std::to_string(n) +
                              " float32 values");
  std::memcpy(out, frame, bytes);
  return Status::OK();
}

}  // namespace shardps::compress
