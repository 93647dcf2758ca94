// Reading JSON that shardps's own tools wrote (the launcher's
// RUN_DIR/job.json): a small strict parser into a tree, enough for a tool
// to find a field. Not for the data path: the depth is bounded (64 levels),
// and every malformed input is an error that says where it went wrong.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shardps/status.h"

namespace shardps {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  // An object's members in order (vectors: JsonValue is incomplete here,
  // which std::vector allows and std::map does not promise to).
  std::vector<std::string> keys;
  std::vector<JsonValue> values;

  // The member `key` of an object (a repeated key: the last one), or
  // nullptr (also when this is no object).
  const JsonValue* Find(std::string_view key) const;
  // The member `key` as a string: "" when absent, null or not a string.
  std::string StringAt(std::string_view key) const;
};

// Parses `text` (one JSON value, whitespace around it) into `out`. Errors
// name the byte offset and what was expected there. At most 64 levels deep.
Status ParseJson(std::string_view text, JsonValue* out);

}  // namespace shardps
