// The only translation unit of the coordinator's store that includes
// httplib.h.
#include "server/coordinator/store/etcd_client.h"

#include <httplib.h>

#include <cstring>

#include "common/base/json_read.h"

namespace shardps {
namespace {

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

// An int64 the gateway sends as a JSON string ("123"), or 0.
int64_t IntAt(const JsonValue& v, std::string_view key) {
  const JsonValue* f = v.Find(key);
  if (!f) return 0;
  if (f->kind == JsonValue::Kind::kNumber) return static_cast<int64_t>(f->number);
  return f->kind == JsonValue::Kind::kString ? std::strtoll(f->string.c_str(), nullptr, 10) : 0;
}

}  // namespace

std::string EtcdClient::Base64(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

bool EtcdClient::FromBase64(const std::string& in, std::string* out) {
  out->clear();
  if (in.size() % 4) return false;
  uint32_t v = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '=') {
      if (i + 2 < in.size()) return false;
      continue;
    }
    const char* at = std::strchr(kB64, c);
    if (!at || !c) return false;
    v = (v << 6) | static_cast<uint32_t>(at - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      *out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return true;
}

Status EtcdClient::Post(const std::string& path, const std::string& body, std::string* reply) {
  std::string tried;
  for (size_t k = 0; k < endpoints_.size(); ++k) {
    const size_t i = (good_ + k) % endpoints_.size();
    httplib::Client cli("http://" + endpoints_[i]);
    cli.set_connection_timeout(timeout_);
    cli.set_read_timeout(timeout_);
    cli.set_write_timeout(timeout_);
    auto res = cli.Post(path, body, "application/json");
    if (res && res->status == 200) {
      good_ = i;
      *reply = res->body;
      return Status::OK();
    }
    tried += (tried.empty() ? "" : "; ") + endpoints_[i] + ": " +
             (res ? "HTTP " + std::to_string(res->status) + " " + res->body.substr(0, 200)
                  : httplib::to_string(res.error()));
  }
  return Status::Unavailable("etcd " + path + ": no member answered (" + tried + ")");
}

Status EtcdClient::Call(const std::string& path, const std::string& body, JsonValue* v) {
  std::string reply;
  SHARDPS_RETURN_IF_ERROR(Post(path, body, &reply));
  Status s = ParseJson(reply, v);
  if (!s.ok()) return Status::BadMessage("etcd " + path + " answered what is not JSON: " + s.message());
  return Status::OK();
}

Status EtcdClient::Get(const std::string& key, std::string* value, bool* found) {
  JsonValue v;
  SHARDPS_RETURN_IF_ERROR(Call("/v3/kv/range", "{\"key\": " + Quote(Base64(key)) + "}", &v));
  *found = false;
  const JsonValue* kvs = v.Find("kvs");
  if (!kvs || kvs->array.empty()) return Status::OK();
  if (!FromBase64(kvs->array[0].StringAt("value"), value))
    return Status::BadMessage("etcd: the value of " + key + " is not base64");
  *found = true;
  return Status::OK();
}

Status EtcdClient::Commit(const Txn& t, bool* ok) {
  std::string cmp = t.compare == Txn::kAbsent
                        ? "{\"target\": \"CREATE\", \"key\": " + Quote(Base64(t.key)) +
                              ", \"result\": \"EQUAL\", \"create_revision\": \"0\"}"
                        : "{\"target\": \"VALUE\", \"key\": " + Quote(Base64(t.key)) +
                              ", \"result\": \"EQUAL\", \"value\": " + Quote(Base64(t.value)) + "}";
  std::string ops;
  for (const auto& [k, val] : t.puts)
    ops += std::string(ops.empty() ? "" : ", ") + "{\"request_put\": {\"key\": " + Quote(Base64(k)) +
           ", \"value\": " + Quote(Base64(val)) + (t.lease ? ", \"lease\": \"" + std::to_string(t.lease) + "\"" : "") +
           "}}";
  for (const auto& k : t.deletes)
    ops += std::string(ops.empty() ? "" : ", ") + "{\"request_delete_range\": {\"key\": " + Quote(Base64(k)) + "}}";
  JsonValue v;
  SHARDPS_RETURN_IF_ERROR(Call("/v3/kv/txn", "{\"compare\": [" + cmp + "], \"success\": [" + ops + "]}", &v));
  const JsonValue* s = v.Find("succeeded");
  *ok = s && s->kind == JsonValue::Kind::kBool && s->boolean;  // (absent: false)
  return Status::OK();
}

Status EtcdClient::Grant(int64_t ttl_sec, int64_t* lease) {
  JsonValue v;
  SHARDPS_RETURN_IF_ERROR(Call("/v3/lease/grant", "{\"TTL\": \"" + std::to_string(ttl_sec) + "\"}", &v));
  *lease = IntAt(v, "ID");
  if (*lease == 0) return Status::Unavailable("etcd granted no lease (" + v.StringAt("error") + ")");
  return Status::OK();
}

Status EtcdClient::KeepAlive(int64_t lease, int64_t* ttl) {
  JsonValue v;
  SHARDPS_RETURN_IF_ERROR(Call("/v3/lease/keepalive", "{\"ID\": \"" + std::to_string(lease) + "\"}", &v));
  const JsonValue* r = v.Find("result");
  *ttl = r ? IntAt(*r, "TTL") : 0;
  return Status::OK();
}

Status EtcdClient::Revoke(int64_t lease) {
  std::string reply;
  return Post("/v3/lease/revoke", "{\"ID\": \"" + std::to_string(lease) + "\"}", &reply);
}

}  // namespace shardps
