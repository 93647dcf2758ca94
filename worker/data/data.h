// Training data: Fashion-MNIST from its IDX files (Debian's
// dataset-fashion-mnist: /usr/share/datasets/fashion-mnist/*.gz), and a
// synthetic click log for the sparse model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardps/status.h"

namespace shardps::worker {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  int rows = 0;
  int cols = 0;
  int classes = 10;
  std::vector<float> x;  // rows x cols, scaled to [0, 1]
  std::vector<float> y;  // class ids as floats (what the device reads)
  bool loaded = false;   // set by LoadFashionMnist once every example is read (a set may have 0 rows)
};

// Reads {dir}/{train|t10k}-{images-idx3|labels-idx1}-ubyte[.gz] (gzip or
// plain). limit > 0 keeps the first `limit` examples. A missing, truncated
// or inconsistent file is an error naming the file and what is wrong (and
// leaves out->loaded false).
Status LoadFashionMnist(const std::string& dir, bool train, Dataset* out, int limit = 0);

// Parses an IDX buffer (big-endian header): magic 0x0803 (uint8, 3 dims) or
// 0x0801 (uint8, 1 dim). Exposed for tests.
Status ParseIdx(const std::vector<uint8_t>& bytes, const std::string& name, int want_dims,
                std::vector<uint32_t>* dims, const uint8_t** data);
Status ReadMaybeGzip(const std::string& path, std::vector<uint8_t>* out);

// The examples of rank `rank` of `world` for one epoch: a permutation of
// all `n` examples shuffled with (seed, epoch) — the same on every worker —
// taking every world-th one from position `rank`. So the batches of all
// ranks at step t together are the batch of one process with world x the
// batch size (what synchronous training relies on). shuffle=false keeps
// the original order.
std::vector<uint32_t> EpochShard(uint32_t n, int rank, int world, uint64_t seed, int epoch, bool shuffle);

// A synthetic click log: each example has `ids_per_example` feature ids
// drawn from a Zipf(s) distribution over `id_space` ids (hashed), and a
// label drawn from sigmoid(sum of hidden true weights + bias), so the best
// achievable accuracy is known (bayes_accuracy).
struct ClickLogOptions {
  uint64_t id_space = 10'000'000;
  int ids_per_example = 20;
  double zipf_s = 1.1;
  float weight_scale = 1.0f;
  uint64_t seed = 7;
};
struct ClickBatch {
  std::vector<uint32_t> offsets;  // example i: ids[offsets[i] .. offsets[i+1])
  std::vector<uint64_t> ids;
  std::vector<float> labels;
  double bayes_accuracy = 0;  // mean of max(p, 1-p) under the true model
};
// Examples with indices [first, first + count) of the stream `stream`
// (0 = training, 1 = test); every worker generates only its own.
void GenerateClicks(const ClickLogOptions& o, int stream, uint64_t first, uint32_t count, ClickBatch* out);
// The hidden true weight of feature `id` (and of the bias for id = ~0).
float TrueClickWeight(const ClickLogOptions& o, uint64_t id);

}  // namespace shardps::worker
