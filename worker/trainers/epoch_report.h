// The evaluation after an epoch and what a dense-model worker reports of
// it: the test accuracy of the parameters on the device, the epoch line,
// the CSV row and the line of a job asked to stop.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "shardps/status.h"
#include "worker/data/data.h"
#include "worker/devices/device.h"
#include "worker/models/mlp.h"
#include "worker/trainers/progress.h"

namespace shardps::worker {

// The share of `test` that `mlp` (its parameters as on the device)
// classifies correctly, in batches of 1000.
double TestAccuracy(Device& dev, Mlp& mlp, const Dataset& test);

// How much of an epoch a worker trained, for its epoch line: pooled, "H of
// E examples" (the examples its pool handed out and no dead worker handed
// back, of the epoch's); else "H examples of its shard".
std::string TrainedWhat(bool pooled, uint64_t handed, uint64_t examples);

// Thread: one (the trainer's); every member is its.
class EpochReport {
 public:
  EpochReport(int rank, FILE* out) : rank_(rank), out_(out) {}
  // The CSV rows go to `csv` (empty: none). InvalidArgument if it cannot be written.
  Status Open(const std::string& csv) { return csv_.Open(csv); }
  // The job's time starts now.
  void Start() { t_start_ = NowSeconds(); }
  double elapsed() const { return NowSeconds() - t_start_; }
  // "worker R | epoch N done | <trained> | train loss L | test accuracy A%<note> | T s", and the CSV row.
  void EpochDone(int epoch, const std::string& trained, double mean_loss, double accuracy,
                 const std::string& note = "");
  // "worker R | stopped on request in epoch N after B batches of it".
  void Stopped(int epoch, int trained);

 private:
  const int rank_;
  FILE* const out_;
  CsvLog csv_;
  double t_start_ = 0;
};

}  // namespace shardps::worker
