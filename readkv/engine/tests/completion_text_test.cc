#include "readkv/engine/completion_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace readkv::engine {
namespace {

// Feeds `text` one byte per token, as the byte-level model does; returns the released pieces.
std::vector<std::string> FeedBytes(CompletionText& out, const std::string& text) {
  std::vector<std::string> pieces;
  for (char c : text) pieces.push_back(out.Append(std::string(1, c)));
  return pieces;
}

TEST(CompletionTextTest, WithoutStopStringsReleasesAsciiImmediately) {
  CompletionText text;
  const auto pieces = FeedBytes(text, "abc");
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(text.Finish(), "");
  EXPECT_EQ(text.released(), "abc");
}

TEST(CompletionTextTest, HoldsAMultiByteCharacterUntilItIsComplete) {
  CompletionText text;
  const std::string euro = "\xE2\x82\xAC";  // U+20AC
  const auto pieces = FeedBytes(text, euro + "x");
  EXPECT_EQ(pieces, (std::vector<std::string>{"", "", euro, "x"}));
}

TEST(CompletionTextTest, ReplacesInvalidBytesAndUnfinishedCharacters) {
  CompletionText text;
  EXPECT_EQ(text.Append("\xFF"), "\xEF\xBF\xBD");
  EXPECT_EQ(text.Append("\xC3"), "");  // could still become a character
  EXPECT_EQ(text.Append("A"),
            "\xEF\xBF\xBD"
            "A");  // it did not
  EXPECT_EQ(text.Append("\xE2\x82"), "");
  EXPECT_EQ(text.Finish(), "\xEF\xBF\xBD");
}

TEST(CompletionTextTest, RejectsOverlongAndSurrogateEncodings) {
  std::string out;
  std::string bytes =
      "\xC0\xAF"
      "\xED\xA0\x80"
      "ok";  // overlong '/', then a UTF-16 surrogate
  TakeCompleteUtf8(bytes, out);
  EXPECT_TRUE(bytes.empty());
  EXPECT_EQ(out.substr(out.size() - 2), "ok");
  EXPECT_EQ(out.find('\xC0'), std::string::npos);
  EXPECT_EQ(out.find('\xED'), std::string::npos);
}

TEST(CompletionTextTest, EndsBeforeTheStopStringAndHoldsPossiblePrefixes) {
  CompletionText text({"STOP"});
  std::string released;
  for (char c : std::string("abST")) released += text.Append(std::string(1, c));
  EXPECT_EQ(released, "ab");  // "ST" might start STOP
  released += text.Append("O");
  released += text.Append("P");
  EXPECT_TRUE(text.stopped());
  EXPECT_EQ(released, "ab");
  EXPECT_EQ(text.Append("more"), "");
  EXPECT_EQ(text.Finish(), "");
}

TEST(CompletionTextTest, AFalseStartOfAStopStringIsReleased) {
  CompletionText text({"STOP"});
  std::string released;
  for (char c : std::string("STOx")) released += text.Append(std::string(1, c));
  EXPECT_FALSE(text.stopped());
  EXPECT_EQ(released, "STOx");
}

TEST(CompletionTextTest, TheEarliestOfSeveralStopStringsWins) {
  CompletionText text({"world", "lo w"});
  const std::string released = text.Append("hello world");
  EXPECT_TRUE(text.stopped());
  EXPECT_EQ(released, "hel");
}

TEST(CompletionTextTest, FinishReleasesAHeldBackPrefix) {
  CompletionText text({"END"});
  EXPECT_EQ(text.Append("xE"), "x");
  EXPECT_EQ(text.Finish(), "E");
  EXPECT_EQ(text.released(), "xE");
}

}  // namespace
}  // namespace readkv::engine
