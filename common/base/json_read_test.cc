#include "common/base/json_read.h"

#include <gtest/gtest.h>

namespace shardps {
namespace {

// What the launcher writes to RUN_DIR/job.json (Python's json.dump with
// indent=1) reads back field for field.
TEST(JsonRead, ReadsAJobFile) {
  JsonValue v;
  ASSERT_TRUE(ParseJson(R"({
 "format": 1,
 "coordinator": "tcp://10.0.0.1:5555",
 "security": {"on": true, "keys": "/tmp/run \"x\"/job-keys\u00e9\ud83d\ude00"},
 "processes": [{"role": "server", "rank": 0, "pid": null, "alive": false}, {"rank": -1.5e2}],
 "final": null
}
)", &v).ok());
  EXPECT_EQ(v.StringAt("coordinator"), "tcp://10.0.0.1:5555");
  const JsonValue* sec = v.Find("security");
  ASSERT_NE(sec, nullptr);
  EXPECT_TRUE(sec->Find("on")->boolean);
  EXPECT_EQ(sec->StringAt("keys"), "/tmp/run \"x\"/job-keys\xc3\xa9\xf0\x9f\x98\x80");
  const JsonValue* procs = v.Find("processes");
  ASSERT_EQ(procs->array.size(), 2u);
  EXPECT_EQ(procs->array[0].StringAt("role"), "server");
  EXPECT_EQ(procs->array[0].Find("pid")->kind, JsonValue::Kind::kNull);
  EXPECT_EQ(procs->array[1].Find("rank")->number, -150);
  EXPECT_EQ(v.StringAt("final"), "");    // null: no string
  EXPECT_EQ(v.StringAt("missing"), "");  // absent
  EXPECT_EQ(procs->Find("x"), nullptr);  // not an object
}

TEST(JsonRead, MalformedTextSaysWhereAndWhat) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"", "byte 0: a value was expected"},
      {"{\"a\": 1", "byte 7: ',' or '}' expected"},
      {"{\"a\" 1}", "':' expected after the member name 'a'"},
      {"[1, 2", "',' or ']' expected"},
      {"\"abc", "a string was not closed"},
      {"\"a\\qb\"", "unknown escape '\\q'"},
      {"\"\\u12\"", "4 hex digits"},
      {"{1: 2}", "a member name (a string) expected"},
      {"tru", "unexpected 't'"},
      {"1.2.3", "malformed number '1.2.3'"},
      {"1e999", "malformed number"},
      {"01", "malformed number '01'"},
      {"1.", "malformed number '1.'"},
      {"-.5", "malformed number '-.5'"},
      {"[1e]", "malformed number '1e'"},
      {"\"\\ud800x\"", "an unpaired surrogate \\uD800"},
      {"{} {}", "text after the end of the value"},
      {"\"a\nb\"", "a control character inside a string"},
  };
  for (const auto& c : cases) {
    JsonValue v;
    Status s = ParseJson(c.text, &v);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.text << " -> " << s.message();
  }
}

TEST(JsonRead, NumbersAsJsonWritesThem) {
  JsonValue v;
  ASSERT_TRUE(ParseJson("[0, -0.5, 12.25e2, 1E-2, 4.9e-324, 1e-400]", &v).ok());
  EXPECT_EQ(v.array[1].number, -0.5);
  EXPECT_EQ(v.array[2].number, 1225);
  EXPECT_EQ(v.array[3].number, 0.01);
  EXPECT_EQ(v.array[5].number, 0);  // an underflow is 0, not an error
}

// Python's json.dump writes a path's bytes that are not UTF-8 as lone low
// surrogates (surrogateescape): they come back as those bytes.
TEST(JsonRead, SurrogateEscapedBytesComeBack) {
  JsonValue v;
  ASSERT_TRUE(ParseJson(R"({"keys": "/runs/r\udcff1"})", &v).ok());
  EXPECT_EQ(v.StringAt("keys"), "/runs/r\xff" "1");
}

TEST(JsonRead, DepthIsBounded) {
  JsonValue v;
  EXPECT_TRUE(ParseJson(std::string(64, '[') + std::string(64, ']'), &v).ok());
  EXPECT_FALSE(ParseJson(std::string(65, '[') + std::string(65, ']'), &v).ok());
  Status s = ParseJson(std::string(100000, '['), &v);
  EXPECT_NE(s.message().find("nested deeper than 64 levels"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardps
