#include "common/base/wait_note.h"

#include <algorithm>

#include "common/base/log.h"

namespace shardps {

bool WaitNote::Check(Clock::time_point now) {
  if (said_ || now - start_ < kAfter) return false;
  said_ = true;
  LOG_INFO << Line(now);
  return true;
}

std::string WaitNote::Line(Clock::time_point now) const {
  using std::chrono::duration_cast;
  const int64_t waited = duration_cast<Millis>(now - start_).count();
  const int64_t rest = std::max<int64_t>(0, duration_cast<Millis>(deadline_ - now).count());
  return "waiting for " + std::string(role_) + " " + std::string(endpoint_) + " to answer " + std::string(what_) +
         ": no answer for " + std::to_string(waited / 1000) +
         " s; giving up in " + std::to_string((rest + 500) / 1000) + " s (at " + UtcClockIn(rest) + ")";
}

}  // namespace shardps
