// Deterministic initial values: a pure function of (table name, seed, row,
// column), so the same model comes out whatever the number of servers and
// whichever server first touches a sparse row.
#pragma once

#include <cstdint>

#include "shardps/types.h"

namespace shardps {

// Fills out[0 .. spec.cols) with the initial values of row `row`.
void InitRow(const TableSpec& spec, uint64_t row, float* out);

// The 64-bit stream key of a table (FNV-1a of the name, mixed with the seed).
uint64_t TableStreamKey(const TableSpec& spec);

}  // namespace shardps
