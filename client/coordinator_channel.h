// The client's requests to the coordinator: one header frame each, sent
// through the I/O thread, waited for by the calling thread, and sent again
// (with the same request id) when the coordinator connection comes back
// after a restart. Registration, the cluster view, tables, barriers, work
// claims and leaving the job are such requests.
//
// Threads: any caller thread; a request blocks only its caller. Owns the
// numbering of work claims (atomic); everything else it uses belongs to the
// I/O thread (the socket) or to the Sender (rank, clock).
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "client/io_thread.h"
#include "common/cluster/cluster.h"
#include "common/codec/wire.h"
#include "common/net/net.h"
#include "shardps/client.h"

namespace shardps::detail {

class CoordinatorChannel {
 public:
  // `opts`, `self` and `io` outlive this.
  CoordinatorChannel(const ClientOptions& opts, Sender& self, IoThread& io) : opts_(opts), self_(self), io_(io) {}

  // A coordinator's reply: the message and its parsed header (pointing into
  // msg or scratch).
  struct Reply {
    zmq::message_t msg;
    std::vector<uint64_t> scratch;
    const wire::Header* h = nullptr;
  };
  // Sends `f` (its body, if any, built in `fbb`) and waits up to `timeout`
  // (and a second more for a resend) for the reply, whose status it
  // returns; *r holds the reply when OK. A coordinator that restarted (on
  // its saved state) lost the requests it had not answered: each is sent
  // again, with its request id, when the connection comes back (what it
  // asks is idempotent: a claim of the same clock or sequence number gets
  // the same grant). An answer that takes longer than WaitNote::kAfter is
  // said once in the log (common/base/wait_note.h): what is awaited
  // (`what`: "the registration"), from whom and until when.
  Status Ask(flatbuffers::FlatBufferBuilder& fbb, wire::Fields f, wire::Body body_type, flatbuffers::Offset<void> body,
             Millis timeout, Reply* r, std::string_view what);

  // Registers this client (a worker claims opts.rank, or is given one: then
  // self.rank is set). A restarted worker told NotReady (its old process is
  // not declared dead yet) asks again until connect_timeout.
  Status Register();
  // The cluster view, once every server registered and holds the map.
  Status GetCluster(Millis timeout, ClusterView* out);
  // Defines `spec` (or finds the same table): the table as the job has it.
  Status CreateTable(const TableSpec& spec, TableSpec* out);
  // Waits until every live worker reached the barrier. Workers only.
  Status Barrier(Millis timeout);
  // Client::ClaimWork: each claim is numbered, so that one sent again gets
  // the same grant.
  Status ClaimWork(uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& o, WorkRange* out);
  // A worker leaves the job (is no longer waited for).
  Status Leave();

 private:
  const ClientOptions& opts_;
  Sender& self_;
  IoThread& io_;
  std::atomic<uint64_t> claim_seq_{0};  // pooled claims, numbered: one sent again gets the same grant
};

}  // namespace shardps::detail
