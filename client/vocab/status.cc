#include "shardps/status.h"

namespace shardps {

std::string_view CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kBadMessage: return "BadMessage";
    case Code::kVersionMismatch: return "VersionMismatch";
    case Code::kUnknownTable: return "UnknownTable";
    case Code::kSizeMismatch: return "SizeMismatch";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kTooLarge: return "TooLarge";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kWrongServer: return "WrongServer";
    case Code::kNotReady: return "NotReady";
    case Code::kTimeout: return "Timeout";
    case Code::kConflict: return "Conflict";
    case Code::kUnavailable: return "Unavailable";
    case Code::kInternal: return "Internal";
    case Code::kStaleClock: return "StaleClock";
    case Code::kPermissionDenied: return "PermissionDenied";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += msg_;
  return s;
}

}  // namespace shardps
