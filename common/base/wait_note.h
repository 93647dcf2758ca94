// WaitNote: a wait that may be long, said once. The first time it is
// checked kAfter or more after the wait began, it logs one line naming who
// is waited for and for what, how long it has waited, and when the wait
// gives up:
//
//   waiting for coordinator tcp://10.0.0.1:7000 to answer this server's
//   registration: no answer for 3 s; giving up in 57 s (at 12:34:56 UTC)
//
//   WaitNote note("coordinator", endpoint, "this server's registration", Clock::now(), deadline);
//   while (...) { note.Check(); ... }
//
// Used by every wait on the coordinator (the client's calls, a server's
// registration), so that an operator sees the same line from each. It
// keeps views of the three strings (they must outlive it) and builds the
// line only when it says it: a wait that is answered in time costs no
// allocation (the client's ClaimWork is one a step under sync).
// Thread: one (the waiting thread's).
#pragma once

#include <string>
#include <string_view>

#include "common/base/clock.h"

namespace shardps {

class WaitNote {
 public:
  static constexpr Millis kAfter{3000};

  // Waiting for `role` (e.g. "coordinator") at `endpoint` to answer `what`.
  WaitNote(std::string_view role, std::string_view endpoint, std::string_view what, Clock::time_point start,
           Clock::time_point deadline)
      : role_(role), endpoint_(endpoint), what_(what), start_(start), deadline_(deadline) {}

  // Logs Line(now) at info level the first time it is called kAfter or
  // more after `start`; returns whether this call logged it.
  bool Check(Clock::time_point now = Clock::now());
  // The line Check logs, as of `now`.
  std::string Line(Clock::time_point now) const;

 private:
  const std::string_view role_, endpoint_, what_;
  const Clock::time_point start_, deadline_;
  bool said_ = false;
};

}  // namespace shardps
