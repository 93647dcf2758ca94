#include "worker/trainers/epoch_report.h"

#include <algorithm>

namespace shardps::worker {

double TestAccuracy(Device& dev, Mlp& mlp, const Dataset& test) {
  const int EB = 1000;
  DeviceBuffer ex(&dev, static_cast<size_t>(EB) * test.cols), ey(&dev, EB), es(&dev, 2);
  dev.Zero(es.data(), 2);
  for (int first = 0; first < test.rows; first += EB) {
    const int n = std::min(EB, test.rows - first);
    dev.Upload(ex.data(), &test.x[static_cast<size_t>(first) * test.cols], static_cast<size_t>(n) * test.cols);
    dev.Upload(ey.data(), &test.y[first], n);
    mlp.Evaluate(ex.data(), ey.data(), n, es.data());
  }
  float st[2];
  dev.Download(st, es.data(), 2);
  return static_cast<double>(st[1]) / test.rows;
}

std::string TrainedWhat(bool pooled, uint64_t handed, uint64_t examples) {
  char trained_what[96];
  if (pooled)
    std::snprintf(trained_what, sizeof trained_what, "%llu of %llu examples", static_cast<unsigned long long>(handed),
                  static_cast<unsigned long long>(examples));
  else
    std::snprintf(trained_what, sizeof trained_what, "%llu examples of its shard",
                  static_cast<unsigned long long>(handed));
  return trained_what;
}

void EpochReport::EpochDone(int epoch, const std::string& trained, double mean_loss, double accuracy,
                            const std::string& note) {
  std::fprintf(out_, "worker %d | epoch %d done | %s | train loss %.4f | test accuracy %.2f%%%s | %.1f s\n", rank_,
               epoch, trained.c_str(), mean_loss, 100.0 * accuracy, note.c_str(), elapsed());
  std::fflush(out_);
  csv_.Row(elapsed(), epoch, mean_loss, accuracy);
}

void EpochReport::Stopped(int epoch, int trained) {
  std::fprintf(out_, "worker %d | stopped on request in epoch %d after %d batches of it\n", rank_, epoch, trained);
}

}  // namespace shardps::worker
