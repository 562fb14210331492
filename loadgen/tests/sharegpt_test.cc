// The ShareGPT workload: the file read with every field checked, vLLM's pruning, the seeded
// choice, and a real run against an HTTP server on 127.0.0.1 whose POST /tokenize counts with a
// known rule: every request's prompt is a dataset human turn and its max_tokens the server's count
// of the gpt reply that follows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

#include "kvgate/loadgen/datasets.h"
#include "kvgate/loadgen/report.h"
#include "kvgate/loadgen/run_load.h"
#include "tls_test_server.h"

namespace kvgate::loadgen {
namespace {

namespace ht = http::testing;

// The test's tokenizer: one token per started group of 3 bytes, plus BOS unless the request says
// add_special_tokens: false.
int64_t Tokens(const std::string& text, bool bos) {
  return (bos ? 1 : 0) + (static_cast<int64_t>(text.size()) + 2) / 3;
}

ht::TestReply Serve(const ht::TestRequest& request, bool tokenize) {
  if (request.target == "/tokenize" && tokenize) {
    const nlohmann::json body = nlohmann::json::parse(request.body);
    const std::string text = body.contains("messages")
                                 ? body["messages"].back()["content"].get<std::string>()
                                 : body["prompt"].get<std::string>();
    const int64_t count = Tokens(text, body.value("add_special_tokens", true));
    return {200, "application/json", {nlohmann::json{{"count", count}}.dump()}, {}};
  }
  if (request.target == "/v1/chat/completions") {
    return {200, "text/event-stream", ht::ChatStreamParts(2, 1), {}};
  }
  return {404, "application/json", {R"({"error":{"message":"no such endpoint"}})"}, {}};
}

std::string Text(int bytes, char fill) { return std::string(static_cast<size_t>(bytes), fill); }

// A temporary file removed at the end of the test.
struct TempFile {
  explicit TempFile(const std::string& text)
      : path((std::filesystem::temp_directory_path() /
              ("kvgate_sharegpt_" + std::to_string(::getpid()) + "_" +
               std::to_string(counter++) + ".json"))
                 .string()) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
  static inline int counter = 0;
};

// 12 usable pairs of distinct sizes, one pair too short to use, one conversation without a
// human->gpt pair.
nlohmann::json Dataset() {
  nlohmann::json data = nlohmann::json::array();
  for (int i = 0; i < 12; ++i) {
    data.push_back({{"id", i},
                    {"conversations",
                     {{{"from", "human"}, {"value", Text(30 + 3 * i, static_cast<char>('a' + i))}},
                      {{"from", "gpt"}, {"value", Text(60 + 6 * i, 'r')}},
                      {{"from", "human"}, {"value", "and then?"}}}}});
  }
  data.push_back({{"conversations",
                   {{{"from", "human"}, {"value", "hi"}}, {{"from", "gpt"}, {"value", "yo"}}}}});
  data.push_back({{"conversations", {{{"from", "gpt"}, {"value", "only a reply"}}}}});
  return data;
}

TEST(ShareGptTest, ReadsTheFirstHumanTurnAndTheReplyAfterIt) {
  TempFile file(Dataset().dump());
  int64_t skipped = -1;
  std::vector<ShareGptPair> pairs = ReadShareGpt(file.path, &skipped);
  ASSERT_EQ(pairs.size(), 13u);
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(pairs[2].prompt, Text(36, 'c'));
  EXPECT_EQ(pairs[2].reply, Text(72, 'r'));
  EXPECT_EQ(pairs[2].entry, 2);
}

TEST(ShareGptTest, AMalformedFileNamesTheFileTheEntryAndTheField) {
  nlohmann::json data = Dataset();
  data[3]["conversations"][1]["value"] = 7;
  TempFile bad_field(data.dump());
  try {
    ReadShareGpt(bad_field.path);
    FAIL() << "no error";
  } catch (const SettingsError& e) {
    EXPECT_EQ(e.field(), "dataset");
    EXPECT_NE(std::string(e.what()).find(bad_field.path + ": entry 3: conversations[1]"),
              std::string::npos)
        << e.what();
  }
  TempFile not_json("[\n{\"conversations\": []},\n{oops}\n]");
  try {
    ReadShareGpt(not_json.path);
    FAIL() << "no error";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find(not_json.path + ":3: not valid JSON"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ReadShareGpt("/nonexistent/sharegpt.json"), SettingsError);
}

TEST(ShareGptTest, ReadFileBytesDigestsTheBytes) {
  TempFile abc("abc");  // FIPS 180-2's first test vector
  EXPECT_EQ(ReadFileBytes(abc.path, "dataset").sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_THROW(ReadFileBytes("/nonexistent/file", "dataset"), SettingsError);
}

// Each loader reads its file once and returns the digest of the bytes it parsed: the same
// digest ReadFileBytes gives for the file (so a run records what it recorded before), and one that
// cannot name bytes written after the parse.
TEST(ShareGptTest, EachLoaderReturnsTheDigestOfTheBytesItParsed) {
  const std::string prompts =
      "{\"prompt\": \"alpha beta\"}\n{\"prompt\": \"gamma\", \"max_tokens\": 3}\n";
  TempFile prompt_file(prompts);
  WorkloadSettings settings;
  settings.kind = WorkloadKind::kPromptFile;
  settings.prompt_file = prompt_file.path;
  const Workload workload = Workload::Create(settings, 0);
  EXPECT_EQ(workload.file_lines(), 2u);
  // sha256sum of the same bytes.
  EXPECT_EQ(workload.file_sha256(),
            "04f0db0c1d9afe880722bdf7f8cc635c184f6fa367c64d22211b8cab43e11aeb");
  EXPECT_EQ(workload.file_sha256(), ReadFileBytes(prompt_file.path, "prompts").sha256);
  std::ofstream(prompt_file.path) << "{\"prompt\": \"changed after the parse\"}\n";
  EXPECT_EQ(workload.file_sha256(),
            "04f0db0c1d9afe880722bdf7f8cc635c184f6fa367c64d22211b8cab43e11aeb");

  TempFile trace(
      "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 2, \"hash_ids\": [1]}\n");
  std::string trace_sha;
  ASSERT_EQ(ReadTrace(trace.path, 512, &trace_sha).size(), 1u);
  EXPECT_EQ(trace_sha, "bfba725ffdafeb04e55924cb9a429595251c873fb51f9f7a9b4b1d86de4d02fa");
  EXPECT_EQ(trace_sha, ReadFileBytes(trace.path, "trace").sha256);

  TempFile dataset(Dataset().dump());
  std::string dataset_sha;
  EXPECT_FALSE(ReadShareGpt(dataset.path, nullptr, &dataset_sha).empty());
  EXPECT_EQ(dataset_sha, ReadFileBytes(dataset.path, "dataset").sha256);
  EXPECT_EQ(dataset_sha, Sha256Hex(Dataset().dump()));
}

TEST(ShareGptTest, PrunesAsVllmDoes) {
  EXPECT_TRUE(ShareGptPairFits(4, 4));
  EXPECT_FALSE(ShareGptPairFits(3, 100));
  EXPECT_FALSE(ShareGptPairFits(100, 3));
  EXPECT_TRUE(ShareGptPairFits(1024, 1024));
  EXPECT_FALSE(ShareGptPairFits(1025, 4));
  EXPECT_FALSE(ShareGptPairFits(1000, 1049));
}

TEST(ShareGptTest, TheChoiceIsSeededAndSkipsPairsThatDoNotFit) {
  TempFile file(Dataset().dump());
  const std::vector<ShareGptPair> pairs = ReadShareGpt(file.path);
  auto count = [](const std::string& text) { return Tokens(text, false); };
  auto prompts = [&](uint64_t seed) {
    std::vector<std::string> out;
    for (const auto& entry : SelectShareGpt(pairs, 13, seed, count, count).requests) {
      out.push_back(entry.prompt.get<std::string>());
    }
    return out;
  };
  const std::vector<std::string> a = prompts(1);
  EXPECT_EQ(a, prompts(1));
  EXPECT_NE(a, prompts(2));
  ASSERT_EQ(a.size(), 12u);  // the "hi"/"yo" pair is below 4 tokens
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 12u);
  auto none = [](const std::string&) { return int64_t{2}; };
  EXPECT_THROW(SelectShareGpt(pairs, 5, 1, none, none), SettingsError);
}

LoadSettings ShareGptSettings(const std::string& path) {
  LoadSettings s;
  s.rate_rps = 50;
  s.arrival = Arrival::kConstant;
  s.requests = 8;
  s.request_timeout_s = 10;
  s.workload.kind = WorkloadKind::kShareGpt;
  s.workload.dataset = path;
  return s;
}

TEST(ShareGptTest, EachRequestIsAHumanTurnWithItsRepliesTokenCountAsMaxTokens) {
  TempFile file(Dataset().dump());
  std::map<std::string, std::string> reply_of;
  for (const ShareGptPair& pair : ReadShareGpt(file.path)) reply_of[pair.prompt] = pair.reply;
  ht::TestServer server(false, {}, "", [](const ht::TestRequest& r) { return Serve(r, true); });
  LoadResult result = RunLoad(ShareGptSettings(file.path),
                              Target(server.url(), "m", {}, http::Endpoint::kChat));
  EXPECT_TRUE(result.input_tokens_exact) << result.input_lengths;
  EXPECT_NE(result.input_lengths.find("8 ShareGPT pairs"), std::string::npos)
      << result.input_lengths;
  int checked = 0;
  std::set<std::string> seen;
  for (const ht::TestRequest& r : server.requests()) {
    if (r.target != "/v1/chat/completions") continue;
    const nlohmann::json body = nlohmann::json::parse(r.body);
    const std::string prompt = body["messages"][0]["content"].get<std::string>();
    ASSERT_EQ(reply_of.count(prompt), 1u) << prompt;
    EXPECT_EQ(body["max_tokens"].get<int64_t>(), Tokens(reply_of[prompt], false));
    seen.insert(prompt);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  EXPECT_EQ(seen.size(), 8u);
  // The run names its source: kind, path and the file's SHA-256, in the result and its JSON.
  EXPECT_EQ(result.workload_source.kind, "sharegpt");
  EXPECT_EQ(result.workload_source.path, file.path);
  EXPECT_EQ(result.workload_source.sha256, ReadFileBytes(file.path, "dataset").sha256);
  EXPECT_EQ(LoadResultToJson(result, false)["workload_source"]["sha256"],
            result.workload_source.sha256);
  for (const RequestRecord& r : result.records) EXPECT_TRUE(r.ok()) << r.error_text;
}

TEST(ShareGptTest, WithoutTokenizeTheLengthsAreApproximatedAndTheResultSaysSo) {
  TempFile file(Dataset().dump());
  std::map<std::string, std::string> reply_of;
  for (const ShareGptPair& pair : ReadShareGpt(file.path)) reply_of[pair.prompt] = pair.reply;
  ht::TestServer server(false, {}, "", [](const ht::TestRequest& r) { return Serve(r, false); });
  LoadResult result = RunLoad(ShareGptSettings(file.path),
                              Target(server.url(), "m", {}, http::Endpoint::kChat));
  EXPECT_FALSE(result.input_tokens_exact);
  EXPECT_NE(result.input_lengths.find("approximated"), std::string::npos) << result.input_lengths;
  for (const ht::TestRequest& r : server.requests()) {
    if (r.target != "/v1/chat/completions") continue;
    const nlohmann::json body = nlohmann::json::parse(r.body);
    const std::string prompt = body["messages"][0]["content"].get<std::string>();
    EXPECT_EQ(body["max_tokens"].get<int64_t>(), ApproximateTokens(reply_of[prompt]));
  }
}

}  // namespace
}  // namespace kvgate::loadgen
