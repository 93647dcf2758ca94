#include "common/base/wait_note.h"

#include <gtest/gtest.h>

namespace shardps {
namespace {

TEST(WaitNoteTest, SaysOnceAfterThreeSecondsWhoWhatAndWhenItGivesUp) {
  const auto start = Clock::now();
  WaitNote note("coordinator", "tcp://127.0.0.1:7000", "this server's registration", start, start + Millis(60000));
  EXPECT_FALSE(note.Check(start));
  EXPECT_FALSE(note.Check(start + WaitNote::kAfter - Millis(1)));
  const std::string line = note.Line(start + WaitNote::kAfter);
  EXPECT_EQ(line.rfind("waiting for coordinator tcp://127.0.0.1:7000 to answer this server's registration: "
                       "no answer for 3 s; giving up in 57 s (at ", 0), 0u)
      << line;
  EXPECT_NE(line.find(" UTC)"), std::string::npos) << line;
  EXPECT_TRUE(note.Check(start + WaitNote::kAfter));
  EXPECT_FALSE(note.Check(start + WaitNote::kAfter + Millis(5000)));  // once
}

TEST(WaitNoteTest, APassedDeadlineSaysZeroLeft) {
  const auto start = Clock::now();
  const WaitNote note("coordinator", "c", "a barrier", start, start + Millis(2000));
  EXPECT_NE(note.Line(start + Millis(4000)).find("giving up in 0 s"), std::string::npos);
}

}  // namespace
}  // namespace shardps
