#include "common/base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace shardps {
namespace {
std::mutex g_mu;                   // guards g_name and stderr
std::string g_name = "shardps";     // the process's
thread_local std::string t_name;    // this thread's, if set
std::atomic<LogLevel> g_level{LogLevel::kInfo};
const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarn: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}
}  // namespace

void SetLogName(std::string_view name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_name = std::string(name);
}
void SetThreadLogName(std::string_view name) { t_name = std::string(name); }
void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel GetLogLevel() { return g_level.load(std::memory_order_relaxed); }

bool ParseLogLevel(std::string_view s, LogLevel* out) {
  if (s == "debug") *out = LogLevel::kDebug;
  else if (s == "info") *out = LogLevel::kInfo;
  else if (s == "warn") *out = LogLevel::kWarn;
  else if (s == "error") *out = LogLevel::kError;
  else return false;
  return true;
}

LogLine::~LogLine() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  localtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%H:%M:%S", &tm);
  std::string line = os_.str();
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "%s.%03d %s [%s] %s\n", ts, ms, LevelName(level_), (t_name.empty() ? g_name : t_name).c_str(),
               line.c_str());
}

std::string UtcClockIn(int64_t ms) {
  const std::time_t t = std::time(nullptr) + static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace shardps
