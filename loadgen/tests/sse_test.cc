#include "kvgate/loadgen/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgate::loadgen {
namespace {

struct Collected {
  std::string type;
  std::string data;
  std::string id;
};

std::vector<Collected> ParseInPieces(std::string_view stream, const std::vector<size_t>& cuts) {
  std::vector<Collected> events;
  SseParser parser([&](const SseEvent& e) {
    events.push_back({std::string(e.type), std::string(e.data), std::string(e.id)});
  });
  size_t from = 0;
  for (size_t cut : cuts) {
    EXPECT_TRUE(parser.Feed(stream.substr(from, cut - from)));
    from = cut;
  }
  EXPECT_TRUE(parser.Feed(stream.substr(from)));
  return events;
}

std::vector<Collected> Parse(std::string_view stream) { return ParseInPieces(stream, {}); }

TEST(SseParserTest, FramesDataLinesIntoEvents) {
  auto events = Parse("data: one\n\ndata: two\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].data, "one");
  EXPECT_EQ(events[0].type, "message");
  EXPECT_EQ(events[1].data, "two");
}

TEST(SseParserTest, JoinsMultiLineDataWithNewlines) {
  auto events = Parse("data: first\ndata: second\ndata:third\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "first\nsecond\nthird");
}

TEST(SseParserTest, IgnoresCommentsAndUnknownFieldsAndRetry) {
  auto events = Parse(": keep-alive\nretry: 100\nfoo: bar\ndata: x\n: another\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");
}

TEST(SseParserTest, HandlesCrLfAndBareCrLineEndings) {
  auto crlf = Parse("data: a\r\n\r\ndata: b\r\n\r\n");
  ASSERT_EQ(crlf.size(), 2u);
  EXPECT_EQ(crlf[0].data, "a");
  EXPECT_EQ(crlf[1].data, "b");
  auto cr = Parse("data: a\r\rdata: b\r\r");
  ASSERT_EQ(cr.size(), 2u);
  EXPECT_EQ(cr[1].data, "b");
}

TEST(SseParserTest, CrLfSplitBetweenReadsIsOneLineBreak) {
  // If the LF after a CR were taken as a second line break it would dispatch an extra
  // (empty) line; "data: a\r" + "\ndata: b\r\n\r\n" must still be ONE event "a\nb".
  auto events = ParseInPieces("data: a\r\ndata: b\r\n\r\n", {8});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a\nb");
}

TEST(SseParserTest, EventAndIdFieldsAreReported) {
  auto events = Parse("event: update\nid: 7\ndata: x\n\ndata: y\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, "update");
  EXPECT_EQ(events[0].id, "7");
  EXPECT_EQ(events[1].type, "message");  // event type resets after dispatch
  EXPECT_EQ(events[1].id, "7");          // the last event id persists
}

TEST(SseParserTest, EventWithoutDataIsNotDispatched) {
  auto events = Parse("event: ping\n\n: comment\n\ndata: real\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "real");
}

TEST(SseParserTest, StripsOnlyOneLeadingSpaceAndKeepsColonsInValue) {
  auto events = Parse("data:  two spaces: and a colon\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, " two spaces: and a colon");
}

TEST(SseParserTest, DropsLeadingByteOrderMarkEvenWhenSplit) {
  std::string stream =
      "\xEF\xBB\xBF"
      "data: x\n\n";
  for (size_t cut = 1; cut < 4; ++cut) {
    auto events = ParseInPieces(stream, {cut});
    ASSERT_EQ(events.size(), 1u) << "cut " << cut;
    EXPECT_EQ(events[0].data, "x");
  }
}

TEST(SseParserTest, SameEventsWhateverTheSplitPoints) {
  const std::string stream =
      ": hello\r\ndata: {\"a\": 1}\r\n\r\nevent: e\ndata: line1\ndata: line2\n\n"
      "data: [DONE]\r\r";
  const auto whole = Parse(stream);
  ASSERT_EQ(whole.size(), 3u);
  // Every single split point and every pair of split points.
  for (size_t i = 0; i <= stream.size(); ++i) {
    for (size_t j = i; j <= stream.size(); ++j) {
      auto events = ParseInPieces(stream, {i, j});
      ASSERT_EQ(events.size(), whole.size()) << "cuts " << i << "," << j;
      for (size_t e = 0; e < whole.size(); ++e) {
        EXPECT_EQ(events[e].data, whole[e].data) << "cuts " << i << "," << j;
        EXPECT_EQ(events[e].type, whole[e].type) << "cuts " << i << "," << j;
      }
    }
  }
  // And byte by byte.
  std::vector<size_t> every;
  for (size_t i = 1; i < stream.size(); ++i) every.push_back(i);
  auto bytewise = ParseInPieces(stream, every);
  ASSERT_EQ(bytewise.size(), whole.size());
  EXPECT_EQ(bytewise[2].data, "[DONE]");
}

TEST(SseParserTest, PartialEventAtEndIsPendingNotDispatched) {
  std::vector<std::string> seen;
  SseParser parser([&](const SseEvent& e) { seen.emplace_back(e.data); });
  parser.Feed("data: complete\n\ndata: unfinished\n");
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_TRUE(parser.has_partial_event());
}

TEST(SseParserTest, OversizedLineStopsTheParser) {
  int events = 0;
  SseParser parser([&](const SseEvent&) { ++events; }, /*max_event_bytes=*/64);
  EXPECT_FALSE(parser.Feed("data: " + std::string(100, 'x')));
  EXPECT_TRUE(parser.overflowed());
  EXPECT_FALSE(parser.Feed("\n\n"));
  EXPECT_EQ(events, 0);
}

std::string Chunk(std::string_view text) {
  return "data: "
         "{\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"" +
         std::string(text) + "\",\"finish_reason\":null}],\"usage\":null}\n\n";
}
const std::string kUsage =
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
    "\"total_tokens\":15}}\n\n";

TEST(CompletionStreamTest, TimestampsTokenChunksAndReadsUsageAndDone) {
  CompletionStream stream;
  EXPECT_TRUE(stream.Feed(Chunk(" a"), 100));
  EXPECT_TRUE(stream.Feed(Chunk(" b") + Chunk(" c"), 250));
  EXPECT_TRUE(stream.Feed(kUsage + "data: [DONE]\n\n", 300));
  EXPECT_EQ(stream.token_chunk_ns(), (std::vector<int64_t>{100, 250, 250}));
  EXPECT_TRUE(stream.done());
  EXPECT_EQ(stream.done_ns(), 300);
  EXPECT_EQ(stream.prompt_tokens(), 12);
  EXPECT_EQ(stream.completion_tokens(), 3);
  EXPECT_FALSE(stream.failed());
}

TEST(CompletionStreamTest, ChunkWithEmptyTextIsNotATokenChunk) {
  CompletionStream stream;
  stream.Feed(Chunk("") + Chunk(""), 10);  // e.g. a role/heartbeat chunk before the first token
  stream.Feed(Chunk("x"), 20);
  stream.Feed("data: {\"choices\":[{\"index\":0,\"text\":null}]}\n\n", 30);
  ASSERT_EQ(stream.token_chunk_ns().size(), 1u);
  EXPECT_EQ(stream.token_chunk_ns()[0], 20);
}

TEST(CompletionStreamTest, WithoutUsageTokenCountsStayUnknown) {
  CompletionStream stream;
  stream.Feed(Chunk("x") + Chunk("y") + "data: [DONE]\n\n", 5);
  EXPECT_EQ(stream.completion_tokens(), -1);
  EXPECT_EQ(stream.prompt_tokens(), -1);
  EXPECT_EQ(stream.token_chunk_ns().size(), 2u);
}

TEST(CompletionStreamTest, ChatDeltaContentCountsAsText) {
  CompletionStream stream;
  stream.Feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", 1);
  stream.Feed("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", 2);
  ASSERT_EQ(stream.token_chunk_ns().size(), 1u);
  EXPECT_EQ(stream.token_chunk_ns()[0], 2);
}

TEST(CompletionStreamTest, NonJsonDataIsMalformed) {
  CompletionStream stream;
  stream.Feed(Chunk("x"), 1);
  EXPECT_FALSE(stream.Feed("data: {\"choices\": [{\"text\": \"broken\n\n", 2));
  EXPECT_TRUE(stream.malformed());
  EXPECT_NE(stream.malformed_reason().find("not a JSON object"), std::string::npos);
  EXPECT_FALSE(stream.Feed(Chunk("y"), 3));  // sticky
  EXPECT_EQ(stream.token_chunk_ns().size(), 1u);
}

TEST(CompletionStreamTest, WrongShapesAreMalformed) {
  for (std::string bad : {"data: [1, 2]\n\n", "data: {\"choices\": 5}\n\n",
                          "data: {\"choices\": [{\"text\": 7}]}\n\n", "data: {\"id\": \"c\"}\n\n",
                          "data: {\"choices\": [], \"usage\": 3}\n\n"}) {
    CompletionStream stream;
    stream.Feed(bad, 1);
    EXPECT_TRUE(stream.malformed()) << bad;
  }
}

TEST(CompletionStreamTest, EventAfterDoneIsMalformed) {
  CompletionStream stream;
  stream.Feed("data: [DONE]\n\n", 1);
  EXPECT_FALSE(stream.Feed(Chunk("late"), 2));
  EXPECT_TRUE(stream.malformed());
}

TEST(CompletionStreamTest, ErrorEventIsAStreamErrorWithItsMessage) {
  CompletionStream stream;
  stream.Feed("data: {\"error\": {\"message\": \"out of KV blocks\", \"code\": 500}}\n\n", 1);
  EXPECT_TRUE(stream.stream_error());
  EXPECT_FALSE(stream.malformed());
  EXPECT_NE(stream.stream_error_message().find("out of KV blocks"), std::string::npos);
}

TEST(CompletionStreamTest, SplitEverywhereGivesTheSameTokensAndUsage) {
  const std::string all =
      Chunk(" a") + Chunk("") + ": ping\n" + Chunk(" b") + kUsage + "data: [DONE]\n\n";
  for (size_t cut = 0; cut <= all.size(); ++cut) {
    CompletionStream stream;
    stream.Feed(std::string_view(all).substr(0, cut), 1);
    stream.Feed(std::string_view(all).substr(cut), 2);
    ASSERT_FALSE(stream.failed()) << "cut " << cut;
    EXPECT_EQ(stream.token_chunk_ns().size(), 2u) << "cut " << cut;
    EXPECT_TRUE(stream.done()) << "cut " << cut;
    EXPECT_EQ(stream.completion_tokens(), 3) << "cut " << cut;
  }
}

}  // namespace
}  // namespace kvgate::loadgen
