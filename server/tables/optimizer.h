// Server-side optimizers. Optimizer state lives beside the parameters:
// StateWidth(spec) floats per row, initialised by InitState().
//
//   SGD       w -= lr * g                                   (no state)
//   Momentum  v = momentum * v + g;  w -= lr * v              (v: cols)
//   Adagrad   a += g^2;  w -= lr * g / (sqrt(a) + eps)       (a: cols)
//   Adam      m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  t += 1;
//             w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//             (m: cols, v: cols, t: 1 float per row, exact to 2^24 steps)
// Every rule first scales the gradient by `scale` (1/N for a synchronous
// aggregate of N workers). `lr_scale` (a stale gradient's weight under
// StalenessRule::kScaleLr, 1/staleness) scales this step: lr * lr_scale for
// SGD, Adagrad and Adam (their state sees the whole gradient); for momentum
// the gradient enters the velocity scaled by lr_scale, so this gradient's
// contribution is what lr * lr_scale would give and the velocity built by
// earlier gradients is not shrunk.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shardps/types.h"

namespace shardps {

size_t OptimizerStateWidth(const TableSpec& spec);

// Initial state of `rows` rows (StateWidth floats each).
void InitOptimizerState(const TableSpec& spec, float* state, size_t rows);

// Applies gradients g (rows x cols) to parameters w (rows x cols) with state
// (rows x StateWidth). Arrays must not overlap.
void ApplyOptimizer(const TableSpec& spec, float* __restrict w, float* __restrict state,
                    const float* __restrict g, size_t rows, float scale, float lr_scale = 1.0f);

// The rule a table's stale gradients get: kDefault resolved.
StalenessRule EffectiveStalenessRule(const TableSpec& spec);
// The weight of a gradient `staleness` updates old under `rule`.
float StalenessLrScale(StalenessRule rule, uint64_t staleness);

}  // namespace shardps
