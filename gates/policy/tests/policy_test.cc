#include "kvgate/policy/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace kvgate::policy {
namespace {

const char* kMinimal = R"(
[baseline]
args = ["--kv", "fp8"]
[candidate]
args = ["--kv", "readkv"]
)";

std::string DefaultPolicyPath() { return std::string(KVGATE_SOURCE_DIR) + "/policies/default.toml"; }

// Expects ParsePolicy to fail with a message that starts with "<source>:<line>: <key>: ".
void ExpectError(const std::string& text, int line, const std::string& key,
                 const std::string& fragment) {
  try {
    ParsePolicy(text, "p.toml");
    FAIL() << "accepted: " << text;
  } catch (const PolicyError& e) {
    std::string prefix = "p.toml:" + std::to_string(line) + ": " + key + ": ";
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(e.key(), key);
  }
}

TEST(PolicyTest, DefaultFileParsesAndMatchesTheProductGates) {
  Policy p = LoadPolicyFile(DefaultPolicyPath());
  EXPECT_EQ(p.gates.passkey_required, 200);
  EXPECT_EQ(p.passkey.items, 200);
  EXPECT_DOUBLE_EQ(p.gates.qa_max_f1_drop, 1.0);
  EXPECT_DOUBLE_EQ(p.gates.p99_max_ratio, 1.05);
  EXPECT_DOUBLE_EQ(p.gates.goodput_min_ratio, 1.10);
  EXPECT_GE(p.load.pairs, kMinPairs);
  EXPECT_EQ(p.baseline.kind, ServerSpec::Kind::kLocal);
  EXPECT_EQ(p.baseline.serve_args.at(1), "fp8");
  EXPECT_DOUBLE_EQ(p.candidate.extra_body.at("readkv").at("read_bits").get<double>(), 4.0);
  EXPECT_TRUE(p.baseline.extra_body.empty());
  EXPECT_NE(p.text.find("[gates]"), std::string::npos);  // the exact text is kept
  EXPECT_EQ(p.placement.mode, PlacementSpec::Mode::kSplit);
  EXPECT_EQ(p.placement.suite_cpus, 0);
  EXPECT_NE(p.text.find("[placement]"), std::string::npos);  // every key listed
}

TEST(PolicyTest, LongContextDiffersFromTheDefaultOnlyInTheQualityLengths) {
  Policy d = LoadPolicyFile(DefaultPolicyPath());
  Policy l = LoadPolicyFile(std::string(KVGATE_SOURCE_DIR) + "/policies/long-context.toml");
  EXPECT_EQ(l.passkey.lengths.back(), 8192);
  EXPECT_EQ(l.qa.lengths.back(), 8192);
  EXPECT_LT(d.passkey.lengths.back(), 8192);
  EXPECT_EQ(l.passkey.items, d.passkey.items);
  EXPECT_EQ(l.gates.passkey_required, d.gates.passkey_required);
  EXPECT_EQ(l.candidate.serve_args, d.candidate.serve_args);
  EXPECT_EQ(l.baseline.serve_args, d.baseline.serve_args);
  EXPECT_EQ(l.load.requests, d.load.requests);
  EXPECT_EQ(l.load.concurrency, d.load.concurrency);
  EXPECT_EQ(l.load.pairs, d.load.pairs);
  EXPECT_EQ(l.placement.mode, d.placement.mode);
  EXPECT_EQ(l.placement.suite_cpus, d.placement.suite_cpus);
}

TEST(PolicyTest, H200LongKeepsTheDefaultGatesOnTheGpuAt16K) {
  Policy d = LoadPolicyFile(DefaultPolicyPath());
  Policy h = LoadPolicyFile(std::string(KVGATE_SOURCE_DIR) + "/policies/h200-long.toml");
  EXPECT_EQ(h.gates.passkey_required, d.gates.passkey_required);
  EXPECT_DOUBLE_EQ(h.gates.qa_max_f1_drop, d.gates.qa_max_f1_drop);
  EXPECT_DOUBLE_EQ(h.gates.p99_max_ratio, d.gates.p99_max_ratio);
  EXPECT_DOUBLE_EQ(h.gates.goodput_min_ratio, d.gates.goodput_min_ratio);
  EXPECT_DOUBLE_EQ(h.gates.confidence, d.gates.confidence);
  EXPECT_EQ(h.passkey.items, 200);
  EXPECT_GE(h.passkey.lengths.front(), 16000);
  EXPECT_GE(h.qa.lengths.front(), 16000);
  EXPECT_GE(h.load.pairs, 5);
  // The candidate's per-request read policy is the one its server is started with.
  const nlohmann::json& rp = h.candidate.extra_body.at("readkv");
  const double read_bits = rp.at("read_bits").get<double>();
  const double key_bits = rp.at("key_bits").get<double>();
  const double value_bits = rp.at("value_bits").get<double>();
  const std::string reader = rp.at("reader").get<std::string>();
  // The tile reader, the one GPU reader that applies outlier lists (issue 36), with its lists on.
  EXPECT_EQ(reader, "tile");
  EXPECT_DOUBLE_EQ(0.5 * (key_bits + value_bits), read_bits);
  // The value after `flag` in a server's arguments; nullopt when the flag (or its value) is absent.
  const auto flag_value = [](const std::vector<std::string>& args,
                             const std::string& flag) -> std::optional<std::string> {
    const auto it = std::find(args.begin(), args.end(), flag);
    if (it == args.end() || it + 1 == args.end()) return std::nullopt;
    return *(it + 1);
  };
  const auto arg = [&](const std::string& flag) {
    return flag_value(h.candidate.serve_args, flag).value_or("");
  };
  EXPECT_EQ(std::stod(arg("--read-bits")), read_bits);
  EXPECT_EQ(arg("--reader"), reader);
  EXPECT_GT(std::stoi(arg("--outlier-cap")), 0);
  const std::string split = arg("--kv-split");
  ASSERT_NE(split.find(':'), std::string::npos);
  EXPECT_EQ(std::stod(split.substr(0, split.find(':'))), key_bits);
  EXPECT_EQ(std::stod(split.substr(split.find(':') + 1)), value_bits);
  // Byte keys are read whole (docs/readkv.md "Byte keys"): only with R_K = 8, and in the Value
  // windows the GPU reader's one-launch Value cut takes.
  if (std::find(h.candidate.serve_args.begin(), h.candidate.serve_args.end(), "--byte-keys") !=
      h.candidate.serve_args.end()) {
    EXPECT_EQ(key_bits, 8.0);
    EXPECT_GT(std::stoi(arg("--value-window")), 0);
  }
  for (const ServerSpec* s : {&h.baseline, &h.candidate}) {
    EXPECT_EQ(flag_value(s->serve_args, "--device"), std::optional<std::string>("cuda"));
  }
  // The servers differ only in their caches: the same engine flags on both sides.
  for (const std::string flag : {"--model", "--max-batch", "--prefill-chunk"}) {
    EXPECT_EQ(flag_value(h.baseline.serve_args, flag), flag_value(h.candidate.serve_args, flag))
        << flag;
  }
}

TEST(PolicyTest, MinimalPolicyTakesEveryDefault) {
  Policy p = ParsePolicy(kMinimal);
  Policy d;
  EXPECT_EQ(p.load.pairs, d.load.pairs);
  EXPECT_EQ(p.slo.ttft_ms, d.slo.ttft_ms);
  EXPECT_TRUE(p.candidate_read_policy.empty());
  EXPECT_EQ(p.candidate_read_policy_line, 0);
  for (const ServerSpec* server : {&p.baseline, &p.candidate}) {
    EXPECT_EQ(server->ledger_prefix, "readkv_");  // the reference server's, so nothing changes
    EXPECT_TRUE(server->extra_body.is_object() && server->extra_body.empty());
  }
  RefuseRetiredKeys(p);  // nothing retired: no throw
  // A policy without [placement] (every run stored before it existed) splits, sized by the CPUs.
  EXPECT_EQ(p.placement.mode, PlacementSpec::Mode::kSplit);
  EXPECT_EQ(p.placement.suite_cpus, 0);
}

TEST(PolicyTest, PlacementIsRead) {
  const Policy shared =
      ParsePolicy(std::string(kMinimal) + "[placement]\nmode = \"shared\"\n", "p.toml");
  EXPECT_EQ(shared.placement.mode, PlacementSpec::Mode::kShared);
  const Policy split = ParsePolicy(
      std::string(kMinimal) + "[placement]\nmode = \"split\"\nsuite_cpus = 3\n", "p.toml");
  EXPECT_EQ(split.placement.mode, PlacementSpec::Mode::kSplit);
  EXPECT_EQ(split.placement.suite_cpus, 3);
}

TEST(PolicyTest, BadPlacementIsRejected) {
  const std::string table = std::string(kMinimal) + "[placement]\n";
  ExpectError(table + "mode = \"pinned\"\n", 7, "placement.mode",
              "must be one of shared, split, got 'pinned'");
  ExpectError(table + "suite_cpus = -1\n", 7, "placement.suite_cpus", "must be in [0, 8192]");
  ExpectError(table + "suite_cpus = 1.5\n", 7, "placement.suite_cpus", "must be an integer");
  ExpectError(table + "cpus = \"0-1\"\n", 7, "placement.cpus", "unknown key");
  ExpectError(table + "mode = \"shared\"\nsuite_cpus = 2\n", 6, "placement.suite_cpus",
              "only for mode = \"split\"");
  ExpectError(std::string(kMinimal) + "placement = \"split\"\n", 6, "candidate.placement",
              "unknown key");
  ExpectError("placement = 2\n" + std::string(kMinimal), 1, "placement", "must be a table");
}

TEST(PolicyTest, EveryCommittedPolicyCanRun) {
  for (const char* name : {"default", "long-context", "h200-long"}) {
    const Policy p =
        LoadPolicyFile(std::string(KVGATE_SOURCE_DIR) + "/policies/" + name + ".toml");
    EXPECT_NO_THROW(RefuseRetiredKeys(p)) << name;
    EXPECT_TRUE(p.candidate.extra_body.contains("readkv")) << name;
  }
}

TEST(PolicyTest, ExtraBodyTablesBecomeJsonObjectsPerServer) {
  const Policy p = ParsePolicy(R"(
[baseline]
ledger_prefix = "vllm_kv:"
[baseline.extra_body]
priority = 3
[candidate]
ledger_prefix = "acme_"
[candidate.extra_body]
cache = { depth = 4.5, mode = "constrained", layers = [1, 2] }
flag = true
)");
  EXPECT_EQ(p.baseline.ledger_prefix, "vllm_kv:");
  EXPECT_EQ(p.candidate.ledger_prefix, "acme_");
  EXPECT_EQ(p.baseline.extra_body, nlohmann::json({{"priority", 3}}));
  EXPECT_EQ(p.candidate.extra_body,
            nlohmann::json::parse(R"({"cache": {"depth": 4.5, "mode": "constrained",
                                                "layers": [1, 2]}, "flag": true})"));
}

TEST(PolicyTest, BadExtraBodyOrLedgerPrefixIsRejected) {
  ExpectError("[baseline]\nextra_body = 4\n[candidate]\n", 2, "baseline.extra_body",
              "must be a table");
  ExpectError("[baseline]\nledger_prefix = \"\"\n[candidate]\n", 1, "baseline.ledger_prefix",
              "must start a Prometheus metric name");
  ExpectError("[baseline]\n[candidate]\nledger_prefix = \"9kv-\"\n", 2,
              "candidate.ledger_prefix", "got '9kv-'");
  // A request field the suite sets itself: a candidate asked for fewer tokens would look faster.
  // (Checks after the table is read name the server's section line, as for url and insecure.)
  ExpectError("[baseline]\n[candidate]\n[candidate.extra_body]\nreadkv = { read_bits = 4 }\n"
              "max_tokens = 1\n",
              2, "candidate.extra_body", "may not set 'max_tokens'");
  ExpectError("[baseline]\nextra_body = { stream = false }\n[candidate]\n", 1,
              "baseline.extra_body", "may not set 'stream'");
}

// [candidate.read_policy] still parses (stored runs re-gate and report), but a run refuses it,
// naming its line and the replacement.
TEST(PolicyTest, RetiredReadPolicyParsesButCannotRun) {
  const Policy p = ParsePolicy(
      std::string(kMinimal) + "[candidate.read_policy]\nread_bits = 4\nreader = \"flexible\"\n",
      "p.toml");
  ASSERT_TRUE(p.candidate_read_policy.read_bits.has_value());
  EXPECT_DOUBLE_EQ(*p.candidate_read_policy.read_bits, 4.0);
  EXPECT_EQ(p.candidate_read_policy_line, 6);
  try {
    RefuseRetiredKeys(p);
    FAIL() << "a policy with [candidate.read_policy] was accepted for a run";
  } catch (const PolicyError& e) {
    EXPECT_EQ(e.key(), "candidate.read_policy");
    EXPECT_EQ(std::string(e.what()).rfind("p.toml:6: candidate.read_policy: retired", 0), 0u)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[candidate.extra_body.readkv]"), std::string::npos);
  }
}

TEST(PolicyTest, UnknownKeyIsRejectedWithItsLine) {
  ExpectError(std::string(kMinimal) + "[gates]\np99_max_ration = 1.05\n", 7, "gates.p99_max_ration",
              "unknown key");
  ExpectError(std::string(kMinimal) + "colour = 1\n", 6, "candidate.colour", "unknown key");
  ExpectError("colour = 1\n" + std::string(kMinimal), 1, "colour", "unknown key");
}

TEST(PolicyTest, WrongTypeIsRejected) {
  ExpectError(std::string(kMinimal) + "[load]\npairs = \"five\"\n", 7, "load.pairs",
              "must be an integer");
  ExpectError(std::string(kMinimal) + "[slo]\nttft_ms = true\n", 7, "slo.ttft_ms",
              "must be a number");
  ExpectError("[baseline]\nargs = \"--kv fp8\"\n[candidate]\n", 2, "baseline.args",
              "array of strings");
}

TEST(PolicyTest, OutOfRangeValueIsRejected) {
  ExpectError(std::string(kMinimal) + "[slo]\nttft_ms = 0\n", 7, "slo.ttft_ms", "must be in (0");
  ExpectError(std::string(kMinimal) + "[gates]\nconfidence = 1.5\n", 7, "gates.confidence",
              "must be in [0.5");
  ExpectError(std::string(kMinimal) + "[load]\narrival = \"bursty\"\n", 7, "load.arrival",
              "must be one of constant, gamma, poisson");
  ExpectError(std::string(kMinimal) + "[quality.passkey]\ndepths = [0.5, 1.5]\n", 7,
              "quality.passkey.depths", "must be in [0, 1]");
  ExpectError(std::string(kMinimal) + "[load]\nmulti_turn = 0\n", 7, "load.multi_turn",
              "must be in [1");
  ExpectError(std::string(kMinimal) + "[load]\nmulti_turn = 100000\n", 7, "load.multi_turn",
              "must be in [1");
  ExpectError(std::string(kMinimal) + "[load]\nthink_time_ms = 50\n", 6, "load.think_time_ms",
              "needs multi_turn > 1");
}

TEST(PolicyTest, MultiTurnSessionsAreRead) {
  const Policy p = ParsePolicy(
      std::string(kMinimal) + "[load]\nmulti_turn = 4\nthink_time_ms = 250\n", "p.toml");
  EXPECT_EQ(p.load.multi_turn, 4);
  EXPECT_EQ(p.load.think_time_ms, 250);
  EXPECT_EQ(ParsePolicy(kMinimal, "p.toml").load.multi_turn, 1);
}

TEST(PolicyTest, InconsistentValuesAreRejected) {
  ExpectError(std::string(kMinimal) + "[quality.passkey]\nitems = 10\n", 6, "gates.passkey_required",
              "asks for 200");
  std::string half_split =
      "[baseline]\n[candidate]\n[candidate.read_policy]\nkey_bits = 3\n";
  ExpectError(half_split, 3, "candidate.read_policy", "together");
  ExpectError("[baseline]\nkind = \"url\"\n[candidate]\n", 1, "baseline.url", "needs url");
}

TEST(PolicyTest, UrlServersTakeHttpsChatTrustAndAKeyVariable) {
  Policy p = ParsePolicy(R"(
[baseline]
kind = "url"
url = "https://gw.example/serving/llama/v1"
endpoint = "chat"
cacert = "/etc/ssl/ca.pem"
api_key_env = "PROD_KEY"
[candidate]
kind = "url"
url = "https://canary.example"
insecure = true
)");
  EXPECT_EQ(p.baseline.endpoint, http::Endpoint::kChat);
  EXPECT_EQ(p.baseline.cacert, "/etc/ssl/ca.pem");
  EXPECT_EQ(p.baseline.api_key_env, "PROD_KEY");
  EXPECT_FALSE(p.baseline.insecure);
  EXPECT_EQ(p.candidate.endpoint, http::Endpoint::kCompletions);
  EXPECT_TRUE(p.candidate.insecure);
  EXPECT_EQ(p.candidate.api_key_env, "OPENAI_API_KEY");
}

TEST(PolicyTest, BadEndpointTrustOrKeyVariableIsRejected) {
  const std::string url = "[baseline]\nkind = \"url\"\nurl = \"https://h\"\n";
  ExpectError(url + "endpoint = \"embeddings\"\n[candidate]\n", 4, "baseline.endpoint",
              "must be one of chat, completions");
  ExpectError(url + "insecure = \"yes\"\n[candidate]\n", 4, "baseline.insecure",
              "must be true or false");
  ExpectError(url + "insecure = true\ncacert = \"c.pem\"\n[candidate]\n", 1,
              "baseline.insecure", "cannot be combined with cacert");
  ExpectError(url + "api_key_env = \"$KEY\"\n[candidate]\n", 1, "baseline.api_key_env",
              "must name an environment variable");
  ExpectError("[baseline]\nkind = \"url\"\nurl = \"ftp://h\"\n[candidate]\n", 1,
              "baseline.url", "expected http://");
  ExpectError("[baseline]\ninsecure = true\n[candidate]\n", 1, "baseline.insecure",
              "only for kind = \"url\"");
}

TEST(PolicyTest, MissingServerAndBadTomlAreRejected) {
  ExpectError("[baseline]\n", 0, "candidate", "missing table");
  ExpectError("[baseline\n", 1, "toml", "");
}

// Hostile-test finding (2026-12-02): `--policy DIR` said "missing table", as if the file were an
// empty policy. The path is named for what it is.
TEST(PolicyTest, ADirectoryIsNamedAsOneNotReadAsAnEmptyPolicy) {
  const std::string dir = std::string(KVGATE_SOURCE_DIR) + "/policies";
  try {
    LoadPolicyFile(dir);
    FAIL();
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + ":0: file: is a directory"), std::string::npos)
        << e.what();
  }
}

TEST(PolicyTest, UnreadableFileNamesThePath) {
  try {
    LoadPolicyFile("/nonexistent/policy.toml");
    FAIL();
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/policy.toml:0: file:"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvgate::policy
