// Gradient compression of dense pushes with error feedback
// (docs/compression.md): what a worker's client sends instead of a part's
// float32 gradient, and how a server reads it back.
//
//   top-k  (Compression::kTopK): the k entries of e = g + residual largest
//          in magnitude, k = ceil(fraction x n); frame: uint32 k, k uint32
//          indices (into the part's n values), k float32 values.
//   sign   (Compression::kSign): scale x sign(e), scale = mean |e|
//          (EF-signSGD); frame: float32 scale, ceil(n / 8) bytes of bits,
//          value i's in byte i / 8 at bit i % 8 (1: +scale, 0: -scale).
//
// Error feedback: the encoder leaves in `residual` exactly what it did not
// send, e - decoded(frame), and the next gradient is added to it first: the
// sum of what was sent plus the residual is the sum of the gradients.
//
// Pure functions, no state: the client keeps the residuals
// (client/client.cc), the server decodes (server/request_check.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps::compress {

// Entries top-k keeps of n: ceil(fraction x n), at least 1, at most n.
size_t TopKCount(size_t n, float fraction);
// Bytes of a part of n values, compressed as `kind` (top-k: keeping k).
size_t EncodedBytes(Compression kind, size_t n, size_t k);

// e = g + residual over n values, encoded into `out` (EncodedBytes of
// kind; top-k keeps k, ties broken by the lower index); residual becomes
// e - decoded. Deterministic: the same inputs give the same bytes.
void Encode(Compression kind, const float* g, float* residual, size_t n, size_t k, void* out);

// OK for a frame of `bytes` bytes that Decode can read as n values;
// BadMessage, saying what is wrong, for a frame of the wrong size or a
// top-k index past n. Writes nothing (a push held for its clock is only
// checked when it arrives).
Status Check(Compression kind, const void* frame, size_t bytes, size_t n);
// Reads a frame of `bytes` bytes as n float32 values into `out` (top-k:
// zeros but at its indices; a repeated index adds), after Check.
Status Decode(Compression kind, const void* frame, size_t bytes, size_t n, float* out);

}  // namespace shardps::compress
