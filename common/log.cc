#include "common/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace shardps {
namespace {
std::string g_name = "shardps";
LogLevel g_level = LogLevel::kInfo;
std::mutex g_mu;
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

void SetLogName(std::string_view name) { g_name = std::string(name); }
void SetLogLevel(LogLevel level) { g_level = level; }
LogLevel GetLogLevel() { return g_level; }

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
  std::fprintf(stderr, "%s.%03d %s [%s] %s\n", ts, ms, LevelName(level_), g_name.c_str(), line.c_str());
}

}  // namespace shardps
