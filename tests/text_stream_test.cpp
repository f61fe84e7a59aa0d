// Streamed detokenization (text/text_stream.*): incomplete UTF-8 held back,
// stop strings found across pieces and never returned.
#include <gtest/gtest.h>

#include <string>

#include "text/text_stream.h"

using namespace spool;

TEST(TextStream, HoldsBackIncompleteUtf8) {
  TextStream s;
  EXPECT_EQ(s.push("a\xE2\x82"), "a");  // first two bytes of the euro sign
  EXPECT_EQ(s.push("\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.flush(), "\xF0\x9F");
}

TEST(TextStream, StopsOnStopStringAcrossPieces) {
  TextStream s({"END", "\n\n"});
  EXPECT_EQ(s.push("hello E"), "hello ");
  EXPECT_EQ(s.push("N"), "");
  EXPECT_EQ(s.push("Dx"), "");
  EXPECT_TRUE(s.stopped());
  TextStream t({"END"});
  EXPECT_EQ(t.push("EN"), "");
  EXPECT_EQ(t.push("d"), "ENd");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.flush(), "");
}
