#include "worker/trainers/progress.h"

#include <algorithm>
#include <chrono>

namespace shardps::worker {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status CsvLog::Open(const std::string& path) {
  if (path.empty()) return Status::OK();
  f_.open(path, std::ios::trunc);
  if (!f_) return Status::InvalidArgument("cannot write --csv '" + path + "'");
  f_ << "time_s,epoch,loss,test_accuracy\n";
  return Status::OK();
}

void CsvLog::Row(double t, int epoch, double loss, double accuracy) {
  if (f_.is_open()) f_ << t << "," << epoch << "," << loss << "," << accuracy << std::endl;
}

void Progress::Step(int rank, int epoch, int step, int steps, long n, double loss, int64_t stale,
                    const std::function<std::string()>& extra) {
  samples_ += n;
  since_samples_ += n;
  loss_sum_ += loss;
  loss_n_ += 1;
  max_stale_ = std::max(max_stale_, stale);
  const double now = NowSeconds();
  if (now - last_ < interval_) return;
  std::fprintf(out_, "worker %d | epoch %d step %5d/%d | loss %.4f | %7.0f samples/s | staleness %lld%s\n", rank,
               epoch, step, steps, loss_sum_ / std::max(1L, loss_n_), since_samples_ / std::max(1e-9, now - last_),
               static_cast<long long>(max_stale_), extra ? extra().c_str() : "");
  std::fflush(out_);
  last_ = now;
  since_samples_ = 0;
  loss_sum_ = 0;
  loss_n_ = 0;
  max_stale_ = 0;
}

}  // namespace shardps::worker
