// What a training worker writes as it goes: progress lines every few
// seconds and the evaluator's (time, epoch, loss, accuracy) CSV rows.
// Thread: each object is used by one thread (the trainer's).
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "shardps/status.h"

namespace shardps::worker {

double NowSeconds();  // steady clock

// (time, epoch, loss, test accuracy) rows, after a header line.
class CsvLog {
 public:
  // An empty path writes nothing; InvalidArgument if `path` cannot be written.
  Status Open(const std::string& path);
  void Row(double t, int epoch, double loss, double accuracy);

 private:
  std::ofstream f_;
};

// A progress line every `interval` seconds to `out`: the mean loss, the
// samples per second and the largest staleness since the last line.
class Progress {
 public:
  Progress(double interval, FILE* out = stdout) : interval_(interval), out_(out) {}
  // `extra`, when given, adds to the line (" | ...") when one is printed.
  void Step(int rank, int epoch, int step, int steps, long n, double loss, int64_t stale,
            const std::function<std::string()>& extra = {});
  long samples() const { return samples_; }  // since construction

 private:
  double interval_;
  FILE* out_;
  double last_ = NowSeconds();
  long samples_ = 0, since_samples_ = 0;
  double loss_sum_ = 0;
  long loss_n_ = 0;
  int64_t max_stale_ = 0;
};

}  // namespace shardps::worker
