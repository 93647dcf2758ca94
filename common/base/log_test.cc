// Leveled logging (common/base/log.h): what is printed, and that a log line is
// one expression.
#include "common/base/log.h"

#include <gtest/gtest.h>

#include <string>

namespace shardps {
namespace {

int Evaluated(int* n) { return ++*n; }

TEST(Log, LinesBelowTheLevelAreNeitherPrintedNorEvaluated) {
  SetLogName("logtest");
  SetLogLevel(LogLevel::kWarn);
  int n = 0;
  ::testing::internal::CaptureStderr();
  LOG_INFO << "hidden " << Evaluated(&n);
  LOG_WARN << "shown " << Evaluated(&n);
  const std::string err = ::testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::kInfo);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(err.find("hidden"), std::string::npos) << err;
  EXPECT_NE(err.find(" W [logtest] shown 1\n"), std::string::npos) << err;
}

TEST(Log, ALogLineInsideIfElseBindsAsWritten) {
  int taken = 0;
  ::testing::internal::CaptureStderr();
  for (bool c : {true, false}) {
    if (c)
      LOG_INFO << "then";
    else
      ++taken;
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(taken, 1);  // the else belongs to the if, not to the macro
  EXPECT_NE(err.find("then"), std::string::npos) << err;
}

TEST(Log, ThreadNamesOverrideTheProcessName) {
  SetLogName("proc");
  ::testing::internal::CaptureStderr();
  SetThreadLogName("io");
  LOG_ERROR << "x";
  SetThreadLogName("");
  LOG_ERROR << "y";
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(" E [io] x\n"), std::string::npos) << err;
  EXPECT_NE(err.find(" E [proc] y\n"), std::string::npos) << err;
  LogLevel l;
  EXPECT_TRUE(ParseLogLevel("debug", &l));
  EXPECT_EQ(l, LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("loud", &l));
}

}  // namespace
}  // namespace shardps
