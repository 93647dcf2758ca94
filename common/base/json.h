// Writing JSON by hand for the tools' --json outputs: one escaper, so every
// string leaves quoted and escaped the same way.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace shardps {

// `s` as a JSON string literal, quotes included.
inline std::string JsonString(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

}  // namespace shardps
