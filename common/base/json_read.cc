#include "common/base/json_read.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace shardps {

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  for (size_t i = keys.size(); i-- > 0;)
    if (keys[i] == key) return &values[i];
  return nullptr;
}

std::string JsonValue::StringAt(std::string_view key) const {
  const JsonValue* v = Find(key);
  return v && v->kind == Kind::kString ? v->string : std::string();
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Status Document(JsonValue* out) {
    if (Status st = Value(out, 0); !st.ok()) return st;
    Space();
    if (i_ != s_.size()) return Error("text after the end of the value");
    return Status::OK();
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("JSON at byte " + std::to_string(i_) + ": " + what);
  }
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool Word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  Status Value(JsonValue* out, int depth) {
    if (depth >= kMaxDepth) return Error("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    Space();
    if (i_ >= s_.size()) return Error("a value was expected, the text ended");
    const char c = s_[i_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return String(&out->string);
    }
    if (Word("null")) return out->kind = JsonValue::Kind::kNull, Status::OK();
    if (Word("true")) return out->kind = JsonValue::Kind::kBool, out->boolean = true, Status::OK();
    if (Word("false")) return out->kind = JsonValue::Kind::kBool, out->boolean = false, Status::OK();
    if (c == '-' || (c >= '0' && c <= '9')) return Number(out);
    return Error(std::string("unexpected '") + c + "'");
  }

  bool Digits() {
    const size_t from = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > from;
  }

  // JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  Status Number(JsonValue* out) {
    const size_t start = i_;
    bool ok = true;
    Word("-");
    if (Word("0")) {
      ok = !(i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9');  // no leading zeros
    } else {
      ok = Digits();
    }
    if (ok && Word(".")) ok = Digits();
    if (ok && i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (!Word("+")) Word("-");
      ok = Digits();
    }
    while (i_ < s_.size() && std::string_view("+-0123456789.eE").find(s_[i_]) != std::string_view::npos) {
      ++i_;  // the rest of what was meant as a number, for the message
      ok = false;
    }
    const std::string num(s_.substr(start, i_ - start));
    errno = 0;
    out->number = ok ? std::strtod(num.c_str(), nullptr) : 0;
    if (!ok || (errno == ERANGE && std::abs(out->number) > 1.0)) {  // an underflow to 0 is fine
      i_ = start;
      return Error("malformed number '" + num + "'");
    }
    out->kind = JsonValue::Kind::kNumber;
    return Status::OK();
  }

  static void Utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  static std::string Hex(uint32_t v) {
    static const char* d = "0123456789ABCDEF";
    return {d[(v >> 12) & 15], d[(v >> 8) & 15], d[(v >> 4) & 15], d[v & 15]};
  }

  Status Hex4(uint32_t* cp) {
    if (i_ + 4 > s_.size()) return Error("a \\u escape needs 4 hex digits");
    *cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return Error("a \\u escape needs 4 hex digits");
      *cp = *cp * 16 + static_cast<uint32_t>(d);
    }
    return Status::OK();
  }

  Status String(std::string* out) {
    ++i_;  // the opening quote
    out->clear();
    while (true) {
      if (i_ >= s_.size()) return Error("a string was not closed");
      const char c = s_[i_++];
      if (c == '"') return Status::OK();
      if (static_cast<unsigned char>(c) < 0x20) return Error("a control character inside a string");
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (i_ >= s_.size()) return Error("a string was not closed");
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': *out += e; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (Status st = Hex4(&cp); !st.ok()) return st;
          if (cp >= 0xD800 && cp < 0xDC00 && Word("\\u")) {  // a surrogate pair
            uint32_t lo = 0;
            if (Status st = Hex4(&lo); !st.ok()) return st;
            if (lo < 0xDC00 || lo >= 0xE000) return Error("a high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC80 && cp < 0xDD00) {
            // A lone low surrogate U+DC80..U+DCFF: a byte that was not
            // UTF-8 (Python's surrogateescape, as json.dump writes a path
            // of such bytes), back to that byte.
            *out += static_cast<char>(cp - 0xDC00);
            break;
          } else if (cp >= 0xD800 && cp < 0xE000) {
            return Error("an unpaired surrogate \\u" + Hex(cp));
          }
          Utf8(cp, out);
          break;
        }
        default: return Error(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  Status Array(JsonValue* out, int depth) {
    ++i_;
    out->kind = JsonValue::Kind::kArray;
    Space();
    if (Word("]")) return Status::OK();
    while (true) {
      out->array.emplace_back();
      if (Status st = Value(&out->array.back(), depth + 1); !st.ok()) return st;
      Space();
      if (Word("]")) return Status::OK();
      if (!Word(",")) return Error("',' or ']' expected in an array");
    }
  }

  Status Object(JsonValue* out, int depth) {
    ++i_;
    out->kind = JsonValue::Kind::kObject;
    Space();
    if (Word("}")) return Status::OK();
    while (true) {
      Space();
      if (i_ >= s_.size() || s_[i_] != '"') return Error("a member name (a string) expected in an object");
      std::string key;
      if (Status st = String(&key); !st.ok()) return st;
      Space();
      if (!Word(":")) return Error("':' expected after the member name '" + key + "'");
      out->keys.push_back(std::move(key));
      out->values.emplace_back();
      if (Status st = Value(&out->values.back(), depth + 1); !st.ok()) return st;
      Space();
      if (Word("}")) return Status::OK();
      if (!Word(",")) return Error("',' or '}' expected in an object");
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

Status ParseJson(std::string_view text, JsonValue* out) {
  *out = JsonValue();
  return Parser(text).Document(out);
}

}  // namespace shardps
