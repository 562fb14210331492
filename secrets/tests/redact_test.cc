#include "kvgate/secrets/redact.h"

#include <gtest/gtest.h>

#include <string>

namespace kvgate::secrets {
namespace {

TEST(RedactUrlTest, HidesThePasswordOfUserInfoAndKeepsTheRest) {
  EXPECT_EQ(RedactUrl("http://alice:s3cr3t@127.0.0.1:8000/v1"),
            "http://alice:REDACTED@127.0.0.1:8000/v1");
  EXPECT_EQ(RedactUrl("https://sk-abcdef@api.example.com"), "https://REDACTED@api.example.com");
  // '@' inside the password: the last '@' ends the user info.
  EXPECT_EQ(RedactUrl("http://bob:p@ss@host:1/"), "http://bob:REDACTED@host:1/");
}

TEST(RedactUrlTest, HidesSecretQueryParametersOnly) {
  EXPECT_EQ(RedactUrl("http://h/v1?api_key=abc&model=m&token=t#frag"),
            "http://h/v1?api_key=REDACTED&model=m&token=REDACTED#frag");
  EXPECT_EQ(RedactUrl("http://h/?key=abc&sig=x&X-Amz-Signature=y"),
            "http://h/?key=REDACTED&sig=REDACTED&X-Amz-Signature=REDACTED");
}

TEST(RedactUrlTest, LeavesUrlsWithoutSecretsAndNonUrlsAlone) {
  for (const std::string text : {"http://127.0.0.1:8000", "http://[::1]:8000/v1/models?x=1",
                                 "not a url", "", "://x", "1http://a:b@c"}) {
    EXPECT_EQ(RedactUrl(text), text);
  }
}

TEST(RedactTextTest, RedactsEveryUrlInRunningText) {
  EXPECT_EQ(RedactText("baseline: url 'http://u:pw1@10.0.0.1:1' and http://v:pw2@h/x, done"),
            "baseline: url 'http://u:REDACTED@10.0.0.1:1' and http://v:REDACTED@h/x, done");
  EXPECT_EQ(RedactText("url = \"https://u:pw@h:443/v1\"\n"),
            "url = \"https://u:REDACTED@h:443/v1\"\n");
}

TEST(RedactTextTest, RedactsSecretAssignmentsInEveryForm) {
  EXPECT_EQ(RedactText("api_key = \"sk-123\"\nmodel = \"m\""),
            "api_key = \"REDACTED\"\nmodel = \"m\"");
  EXPECT_EQ(RedactText(R"({"api_key": "sk-123", "model": "m"})"),
            R"({"api_key": "REDACTED", "model": "m"})");
  EXPECT_EQ(RedactText("Authorization: Bearer sk-abcdefgh\r\n"),
            "Authorization: Bearer REDACTED\r\n");
  EXPECT_EQ(RedactText("X-Api-Key: abc123\n"), "X-Api-Key: REDACTED\n");
  EXPECT_EQ(RedactText("kvgate load --api-key sk-1 --url u"),
            "kvgate load --api-key REDACTED --url u");
  EXPECT_EQ(RedactText("--api-key=sk-1"), "--api-key=REDACTED");
  EXPECT_EQ(RedactText("sent Bearer sk-abcdefghij to it"), "sent Bearer REDACTED to it");
  EXPECT_EQ(RedactText(R"({"token": null, "password": "x\"y"})"),
            R"({"token": null, "password": "REDACTED"})");
}

TEST(RedactTextTest, KeepsThePolicysOwnKeys) {
  // Names of the suite's own settings that look like secrets to a careless rule.
  const std::string policy =
      "[quality.passkey]\nitems = 200\nkey_digits = 5\nmax_tokens = 8\n"
      "[candidate.read_policy]\nkey_bits = 7\nvalue_bits = 2\n[gates]\npasskey_required = 200\n"
      "The pass key is 12345. Remember it.\nBearer of news";
  EXPECT_EQ(RedactText(policy), policy);
}

TEST(RedactTextTest, NamesSecretKeysAndHeaders) {
  for (const char* name : {"api_key", "API-KEY", "X-API-Key", "Authorization", "password",
                           "access_token", "OPENAI_API_KEY", "client_secret", "Cookie"}) {
    EXPECT_TRUE(IsSecretName(name)) << name;
  }
  for (const char* name : {"key_bits", "passkey", "max_tokens", "model", "url", "seed",
                           "passkey_required", "key_digits", "monkey"}) {
    EXPECT_FALSE(IsSecretName(name)) << name;
  }
}

}  // namespace
}  // namespace kvgate::secrets
