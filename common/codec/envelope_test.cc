#include "common/codec/envelope.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/codec/wire.h"

namespace shardps::wire {
namespace {

// A request of `extra` array frames after its header.
std::vector<zmq::message_t> Request(flatbuffers::FlatBufferBuilder& fbb, uint64_t id, int extra) {
  Fields f;
  f.type = MsgType::Pull;
  f.request_id = id;
  std::vector<zmq::message_t> out;
  out.push_back(EncodeSimple(fbb, f));
  for (int i = 0; i < extra; ++i) {
    const std::string s = "frame " + std::to_string(id) + "." + std::to_string(i);
    out.emplace_back(s.data(), s.size());
  }
  return out;
}

TEST(Envelope, CarriesMessagesInOrder) {
  flatbuffers::FlatBufferBuilder fbb;
  EnvelopeBuilder b;
  for (uint64_t id = 1; id <= 3; ++id) {
    auto m = Request(fbb, id, static_cast<int>(id) - 1);
    ASSERT_TRUE(b.Fits(m.size()));
    b.Add(m);
  }
  EXPECT_EQ(b.parts(), 3u);
  std::vector<zmq::message_t> out;
  out.emplace_back("routing", 7);  // (what a ROUTER puts first stays first)
  b.Take(fbb, &out);
  EXPECT_TRUE(b.empty());
  ASSERT_EQ(out.size(), 2u + 1 + 2 + 3);
  std::vector<uint64_t> scratch;
  const Header* h = nullptr;
  ASSERT_TRUE(ParseHeader(out[1], scratch, &h).ok());
  ASSERT_EQ(h->type(), MsgType::Envelope);
  std::vector<uint32_t> counts;
  ASSERT_TRUE(EnvelopeParts(*h, out.size() - 2, &counts).ok());
  EXPECT_EQ(counts, (std::vector<uint32_t>{1, 2, 3}));
  // Each message as it was added: its header, then its frames.
  size_t at = 2;
  for (uint64_t id = 1; id <= 3; ++id) {
    const Header* p = nullptr;
    std::vector<uint64_t> s2;
    ASSERT_TRUE(ParseHeader(out[at], s2, &p).ok());
    EXPECT_EQ(p->request_id(), id);
    for (uint32_t i = 1; i < counts[id - 1]; ++i)
      EXPECT_EQ(out[at + i].to_string(), "frame " + std::to_string(id) + "." + std::to_string(i - 1));
    at += counts[id - 1];
  }
}

TEST(Envelope, OneMessageGoesAsItself) {
  flatbuffers::FlatBufferBuilder fbb;
  EnvelopeBuilder b;
  auto m = Request(fbb, 9, 1);
  b.Add(m);
  std::vector<zmq::message_t> out;
  b.Take(fbb, &out);
  ASSERT_EQ(out.size(), 2u);
  std::vector<uint64_t> scratch;
  const Header* h = nullptr;
  ASSERT_TRUE(ParseHeader(out[0], scratch, &h).ok());
  EXPECT_EQ(h->type(), MsgType::Pull);
  EXPECT_EQ(h->request_id(), 9u);
}

TEST(Envelope, LimitsOnPartsAndFrames) {
  flatbuffers::FlatBufferBuilder fbb;
  EnvelopeBuilder b;
  EXPECT_TRUE(b.Fits(kMaxEnvelopeFrames + 10));  // an empty builder takes anything: it goes alone
  for (size_t i = 0; i < kMaxEnvelopeParts; ++i) {
    auto m = Request(fbb, i + 1, 0);
    ASSERT_TRUE(b.Fits(1));
    b.Add(m);
  }
  EXPECT_FALSE(b.Fits(1));
  std::vector<zmq::message_t> out;
  b.Take(fbb, &out);
  EXPECT_TRUE(b.Fits(2));
  auto big = Request(fbb, 100, static_cast<int>(kMaxEnvelopeFrames) - 2);
  b.Add(big);
  EXPECT_TRUE(b.Fits(1));
  EXPECT_FALSE(b.Fits(2));
}

TEST(Envelope, PartsThatDoNotAddUpAreRefused) {
  flatbuffers::FlatBufferBuilder fbb;
  auto make = [&](std::vector<uint32_t> parts) {
    fbb.Clear();
    auto p = fbb.CreateVector(parts);
    HeaderBuilder hb(fbb);
    hb.add_version(kProtocolVersion);
    hb.add_type(MsgType::Envelope);
    if (!parts.empty()) hb.add_parts(p);
    fbb.Finish(hb.Finish());
    return zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize());
  };
  std::vector<uint64_t> scratch;
  std::vector<uint32_t> counts;
  const Header* h = nullptr;
  struct Case {
    std::vector<uint32_t> parts;
    size_t after;
    const char* says;
  };
  for (const Case& c : {Case{{}, 0, "names no messages"}, Case{{2, 0}, 2, "0 frames"},
                        Case{{2, 2}, 3, "have 4 frames, followed by 3"},
                        Case{std::vector<uint32_t>(kMaxEnvelopeParts + 1, 1), kMaxEnvelopeParts + 1, "at most"},
                        Case{{kMaxEnvelopeFrames + 1}, kMaxEnvelopeFrames + 1, "at most"}}) {
    zmq::message_t m = make(c.parts);
    ASSERT_TRUE(ParseHeader(m, scratch, &h).ok());
    Status s = EnvelopeParts(*h, c.after, &counts);
    EXPECT_EQ(s.code(), Code::kBadMessage) << c.says;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace shardps::wire
