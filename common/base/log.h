// Minimal leveled logging to stderr: one line per record, prefixed with the
// time, the level and the process name set by SetLogName().
//   LOG_INFO << "server " << rank << " listening on " << endpoint;
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace shardps {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError };

void SetLogName(std::string_view name);        // the process's name in its log lines
void SetThreadLogName(std::string_view name);  // this thread's, instead (e.g. a library's own thread)
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug" | "info" | "warn" | "error".
bool ParseLogLevel(std::string_view s, LogLevel* out);
// "HH:MM:SS UTC" of the wall clock `ms` milliseconds from now: for a wait's
// "giving up at ..." (thread-safe).
std::string UtcClockIn(int64_t ms);

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

// Makes a log line's expression void (SHARDPS_LOG).
struct LogVoidify {
  void operator&(const LogLine&) {}
};

}  // namespace shardps

// One expression, not an if/else: `if (x) LOG_WARN << ...; else ...` means
// what it says. `&` binds looser than `<<`, so the whole line is built
// before LogVoidify turns it into void.
#define SHARDPS_LOG(level)                                        \
  (::shardps::GetLogLevel() > ::shardps::LogLevel::level) ? (void)0 \
                                                            : ::shardps::LogVoidify() & ::shardps::LogLine(::shardps::LogLevel::level)
#define LOG_DEBUG SHARDPS_LOG(kDebug)
#define LOG_INFO SHARDPS_LOG(kInfo)
#define LOG_WARN SHARDPS_LOG(kWarn)
#define LOG_ERROR SHARDPS_LOG(kError)
