#include "server/reply_outbox.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/codec/wire.h"

namespace shardps {
namespace {

// A reply to request `id` for client `to` (its routing id first).
std::vector<zmq::message_t> Reply(const std::string& to, uint64_t id, int values = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  wire::Fields f;
  f.request_id = id;
  std::vector<zmq::message_t> out;
  out.emplace_back(to.data(), to.size());
  out.push_back(wire::EncodeSimple(fbb, f));
  for (int i = 0; i < values; ++i) out.emplace_back(8);
  return out;
}

// What was sent: per message, its routing id and the request ids it answers.
struct Sent {
  std::string to;
  std::vector<uint64_t> ids;
};

TEST(ReplyOutbox, GathersTheRepliesOfClientsThatSendEnvelopes) {
  ReplyOutbox box;
  std::vector<Sent> sent;
  auto send = [&](std::vector<zmq::message_t>& m) {
    Sent s{m[0].to_string(), {}};
    std::vector<uint64_t> scratch;
    const wire::Header* h = nullptr;
    ASSERT_TRUE(wire::ParseHeader(m[1], scratch, &h).ok());
    if (h->type() != wire::MsgType::Envelope) {
      s.ids.push_back(h->request_id());
    } else {
      std::vector<uint32_t> counts;
      ASSERT_TRUE(wire::EnvelopeParts(*h, m.size() - 2, &counts).ok());
      wire::ForEachMessage(m, 2, counts, nullptr, [&](auto& part) {
        const wire::Header* p = nullptr;
        ASSERT_TRUE(wire::ParseHeader(part[0], scratch, &p).ok());
        s.ids.push_back(p->request_id());
      });
    }
    sent.push_back(s);
  };
  auto plain = Reply("old", 1);
  EXPECT_FALSE(box.Add(plain, send));  // nobody known yet: the caller sends it
  const std::string a = "client-a", b = "client-b";
  box.Remember(zmq::message_t(a.data(), a.size()));
  box.Remember(zmq::message_t(b.data(), b.size()));
  box.Remember(zmq::message_t(a.data(), a.size()));  // (once)
  EXPECT_EQ(box.clients(), 2u);
  for (auto [to, id] : {std::pair{b, 10}, {a, 11}, {b, 12}, {b, 13}}) {
    auto r = Reply(to, id, 1);
    EXPECT_TRUE(box.Add(r, send));
  }
  auto other = Reply("old", 2);
  EXPECT_FALSE(box.Add(other, send));
  EXPECT_TRUE(sent.empty());
  EXPECT_FALSE(box.empty());
  box.Flush(send);
  EXPECT_TRUE(box.empty());
  // One message per client, in the order they got their first reply; one
  // reply goes as itself.
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].to, b);
  EXPECT_EQ(sent[0].ids, (std::vector<uint64_t>{10, 12, 13}));
  EXPECT_EQ(sent[1].to, a);
  EXPECT_EQ(sent[1].ids, (std::vector<uint64_t>{11}));
  sent.clear();
  box.Flush(send);
  EXPECT_TRUE(sent.empty());

  // A full envelope goes first: no message carries more than the limits.
  for (uint64_t id = 0; id < wire::kMaxEnvelopeParts + 5; ++id) {
    auto r = Reply(a, 100 + id);
    EXPECT_TRUE(box.Add(r, send));
  }
  box.Flush(send);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].ids.size(), wire::kMaxEnvelopeParts);
  EXPECT_EQ(sent[1].ids.size(), 5u);
  EXPECT_EQ(sent[1].ids.back(), 100 + wire::kMaxEnvelopeParts + 4);
}

TEST(ReplyOutbox, PastItsMostItForgetsTheClientsWithNothingGathered) {
  ReplyOutbox box;
  auto send = [](std::vector<zmq::message_t>&) {};
  const std::string busy = "busy";
  box.Remember(zmq::message_t(busy.data(), busy.size()));
  auto r = Reply(busy, 1);
  ASSERT_TRUE(box.Add(r, send));
  for (size_t i = 1; i < ReplyOutbox::kMaxClients; ++i) {
    const std::string id = "c" + std::to_string(i);
    box.Remember(zmq::message_t(id.data(), id.size()));
  }
  EXPECT_EQ(box.clients(), ReplyOutbox::kMaxClients);
  const std::string late = "late";
  box.Remember(zmq::message_t(late.data(), late.size()));
  EXPECT_EQ(box.clients(), 2u);  // the one holding a reply, and the newcomer
  auto r2 = Reply(busy, 2);
  EXPECT_TRUE(box.Add(r2, send));
  auto r3 = Reply("c5", 3);
  EXPECT_FALSE(box.Add(r3, send));
}

}  // namespace
}  // namespace shardps
