// shardps/status.h: errors as values.
//
// Every fallible call in shardps returns a Status. A Status is either OK or
// carries a code and a message that says what went wrong and where, e.g.
//   Status::UnknownTable("table 'emb' is not defined on the coordinator")
// Callers must check it: `if (!s.ok()) { ... s.ToString() ... }`, or pass
// it up with SHARDPS_RETURN_IF_ERROR(expr).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "shardps/export.h"

namespace shardps {

// The same numbering as the wire's ErrorCode (schema/shardps.fbs).
enum class Code : unsigned short {
  kOk = 0,
  kBadMessage,
  kVersionMismatch,
  kUnknownTable,
  kSizeMismatch,
  kOutOfRange,
  kTooLarge,
  kInvalidArgument,
  kWrongServer,
  kNotReady,
  kTimeout,
  kConflict,
  kUnavailable,
  kInternal,
  kStaleClock,
  kPermissionDenied,
};

// Name of a code ("Timeout", "OutOfRange", ...).
SHARDPS_EXPORT std::string_view CodeName(Code c);

class [[nodiscard]] SHARDPS_EXPORT Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  static Status OK() { return {}; }
#define SHARDPS_STATUS_CTOR(name) \
  static Status name(std::string msg) { return {Code::k##name, std::move(msg)}; }
  SHARDPS_STATUS_CTOR(BadMessage)
  SHARDPS_STATUS_CTOR(VersionMismatch)
  SHARDPS_STATUS_CTOR(UnknownTable)
  SHARDPS_STATUS_CTOR(SizeMismatch)
  SHARDPS_STATUS_CTOR(OutOfRange)
  SHARDPS_STATUS_CTOR(TooLarge)
  SHARDPS_STATUS_CTOR(InvalidArgument)
  SHARDPS_STATUS_CTOR(WrongServer)
  SHARDPS_STATUS_CTOR(NotReady)
  SHARDPS_STATUS_CTOR(Timeout)
  SHARDPS_STATUS_CTOR(Conflict)
  SHARDPS_STATUS_CTOR(Unavailable)
  SHARDPS_STATUS_CTOR(Internal)
  SHARDPS_STATUS_CTOR(StaleClock)
  SHARDPS_STATUS_CTOR(PermissionDenied)
#undef SHARDPS_STATUS_CTOR

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string msg_;
};

}  // namespace shardps

// Evaluates `expr` (a Status) and returns it from the enclosing function
// unless it is OK:
//   SHARDPS_RETURN_IF_ERROR(ps->Pull(w, params).Wait());
#define SHARDPS_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::shardps::Status shardps_status_ = (expr);        \
    if (!shardps_status_.ok()) return shardps_status_; \
  } while (0)
