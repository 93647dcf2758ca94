// The book of one request (Call): how many server replies and borrowed
// frames it still waits for, its outcome, and where a pull's values go
// (Dest); the stamp book (the latest pull of each table a caller waited
// on). shardps::Request, PullStamp and PulledRows (shardps/client.h) are
// handles on these; their methods are defined in call.cc.
//
// Threads: a Call is shared by the caller threads that hold its Request and
// the I/O thread that completes its parts; every field of its state is
// under Call::mu. A StampBook is shared by every caller thread, under
// StampBook::mu. A Dest belongs to the one request part it describes: built
// by the caller, then moved to the I/O thread with the part.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "shardps/client.h"

namespace shardps::detail {

class RowCache;

// A server's version in a pull's versions: that server was not read.
constexpr uint64_t kNoVersion = ~0ull;

// Per table, the versions of the latest-issued pull a caller waited on: what
// a Push without an explicit stamp was computed on.
struct StampBook {
  struct Entry {
    uint64_t issued = 0;
    std::shared_ptr<const std::vector<uint64_t>> versions;
  };
  std::mutex mu;  // guards latest
  std::unordered_map<uint32_t, Entry> latest;

  // Records `v` as table's latest unless a later-issued pull was offered.
  void Offer(uint32_t table, uint64_t issued, std::shared_ptr<const std::vector<uint64_t>> v);
  // The latest offered for `table`, or null.
  std::shared_ptr<const std::vector<uint64_t>> Get(uint32_t table);
};

// The shared state of one request: how many server replies (parts) and
// borrowed frames are still outstanding, and the outcome.
struct Call {
  std::mutex mu;  // guards every field below (the constant ones are set before the Call is shared)
  std::condition_variable cv;
  int parts_left = 0;
  int frees_left = 0;
  Status status;
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  int64_t max_clock = std::numeric_limits<int64_t>::min();
  zmq::message_t reply;  // control requests: the reply header
  const char* op = "";
  std::chrono::milliseconds default_timeout{0};
  // Pulls: the version of the rows each server sent (kNoVersion: none), and
  // where a successful Wait() records them as the table's latest pull.
  std::vector<uint64_t> versions;
  uint64_t staleness = 0;  // pushes: the largest a server reported
  uint32_t table = 0;
  uint64_t issued = 0;
  std::weak_ptr<StampBook> book;
  std::shared_ptr<const std::vector<uint64_t>> stamp;  // `versions`, once a Wait() returned OK
  // Arrays of the request's own that its borrowed frames point into (a
  // key list's distinct keys, their summed gradients): set before the Call
  // is shared, freed with it, after the last frame.
  std::shared_ptr<const void> owned;

  // REQUIRES: mu held.
  bool DoneLocked() const { return parts_left == 0 && (frees_left == 0 || !status.ok()); }
  // One server's reply (or its failure) arrived. `clocks`: a pull's reply,
  // whose clocks are gathered; `server`'s version is recorded for a pull
  // (`version`), or (a push) `version` is the staleness it reported.
  void PartDone(const Status& s, bool clocks, int64_t minc, int64_t maxc, int server = -1, uint64_t version = 0);
  // The sockets let go of one borrowed frame (ReleaseFrame).
  void FrameFreed();
};

// A Call that failed before anything was sent.
std::shared_ptr<Call> FailedCall(Status s);

// Frames at least this large are sent straight from the caller's memory;
// smaller ones are copied (cheaper than tracking their lifetime).
constexpr size_t kBorrowThreshold = 4096;

// A frame of `size` bytes at `data`: borrowed (no copy, counted in
// call->frees_left until ZeroMQ lets go of it) from kBorrowThreshold up,
// copied below. REQUIRES: a borrowed `data` stays valid until then.
zmq::message_t Borrow(const void* data, size_t size, const std::shared_ptr<Call>& call);

// A PullView's received frames by the offset (in floats) of their rows in
// the request. Written by the I/O thread before it completes the request's
// part, read by the caller after Wait().
struct PulledFrames {
  std::map<uint64_t, std::vector<zmq::message_t>> parts;
};

// Where the values of a pull reply go.
struct Dest {
  std::shared_ptr<PulledFrames> view;  // PullView: keep the frames here
  uint64_t view_offset = 0;            // ... at this offset (floats)
  float* out = nullptr;                // contiguous: out[0 .. floats)
  uint64_t floats = 0;
  std::vector<uint32_t> positions;  // scattered: reply row i -> out row positions[i] ...
  // ... or, when not empty, reply row i -> out rows positions[offsets[i] ..
  // offsets[i + 1]) (a key asked once for all its places in the request)
  std::vector<uint32_t> offsets;
  uint32_t cols = 0;
  DType dtype = DType::kF32;  // the reply's values: converted to float32 as they are placed
  // A pull the row cache may keep: reply row i is row cache_keys[i] of
  // cache_table, read at cache_clock (null: not kept).
  RowCache* cache = nullptr;
  uint32_t cache_table = 0;
  int64_t cache_clock = 0;
  std::vector<uint64_t> cache_keys;
  bool keep_reply = false;  // control request: keep the reply header
  bool clocks = false;      // a pull: aggregate min/max clock

  bool wants_values() const { return out != nullptr || view != nullptr; }
};

// Puts the values of a pull's reply (frames[1..]; frames[0] is the header)
// where `d` says: copied into the caller's array (contiguous, or scattered by
// positions), or kept in the view's frames (moved out of `frames`).
// BadMessage, naming `peer`, when the reply holds other than the rows
// asked for. REQUIRES: d.wants_values().
Status PlaceValues(const Dest& d, std::vector<zmq::message_t>& frames, const std::string& peer);

// The private parts of the public handles, reached through ClientImpl (the
// friend shardps/client.h names; defined in client.cc).
Request MakeRequest(std::shared_ptr<Call> call);
struct StampRef {
  uint32_t table = 0;
  std::shared_ptr<const std::vector<uint64_t>> versions;  // null: an empty stamp
};
StampRef StampOf(const PullStamp& s);

}  // namespace shardps::detail
