#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include "kvgate/filesystem/remove_tree.h"
#include "kvgate/http/blocking_client.h"
#include "kvgate/http/client_config.h"
#include "tls_test_server.h"

namespace kvgate::http {
namespace {

using testing::TestReply;
using testing::TestRequest;
using testing::TestServer;
using namespace std::chrono_literals;

TEST(UrlTest, ParsesHttpAndHttpsWithDefaultPortsAndPrefixes) {
  Url a = Url::Parse("http://127.0.0.1:8000");
  EXPECT_EQ(a.scheme, "http");
  EXPECT_FALSE(a.tls());
  EXPECT_EQ(a.port, "8000");
  EXPECT_EQ(a.host_header, "127.0.0.1:8000");
  EXPECT_EQ(a.text, "http://127.0.0.1:8000");
  Url b = Url::Parse("HTTPS://api.example.com/v1/");
  EXPECT_TRUE(b.tls());
  EXPECT_EQ(b.port, "443");
  EXPECT_EQ(b.prefix, "");
  EXPECT_EQ(b.host_header, "api.example.com");
  Url c = Url::Parse("https://gw:9000/serving/llama/v1");
  EXPECT_EQ(c.prefix, "/serving/llama");
  EXPECT_EQ(c.Join("/v1/models"), "https://gw:9000/serving/llama/v1/models");
  Url d = Url::Parse("http://[::1]:8080");
  EXPECT_EQ(d.host, "::1");
  EXPECT_EQ(d.HostPort(), "[::1]:8080");
}

TEST(UrlTest, RejectsWhatItCannotServeNamingTheUrl) {
  for (const char* bad : {"ftp://x", "127.0.0.1:8000", "http://", "http://x:0", "http://x:99999",
                          "http://x:port", "http://x/?q=1", "https://x#f", "http://[::1"}) {
    try {
      Url::Parse(bad);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field(), "url");
      EXPECT_NE(std::string(e.what()).find('\''), std::string::npos) << e.what();
    }
  }
  // User info is refused, and the message does not repeat the password.
  try {
    Url::Parse("https://user:hunter2@x");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
  }
}

TEST(HeaderTest, ParsesNameValueAndRefusesWhatWouldBreakTheRequest) {
  Header h = ParseHeader("X-Tenant:  blue ");
  EXPECT_EQ(h.name, "X-Tenant");
  EXPECT_EQ(h.value, "blue");
  for (const char* bad : {"no colon", ": v", "Bad Name: v", "Host: x", "content-length: 3",
                          "X-A: a\r\nX-B: b"}) {
    EXPECT_THROW(ParseHeader(bad), ConfigError) << bad;
  }
}

TEST(ClientConfigTest, KeyComesFromTheFlagElseTheEnvironmentAndIsNeverDescribed) {
  ::setenv("OPENAI_API_KEY", "sk-from-env", 1);
  EXPECT_EQ(ResolveApiKey(""), "sk-from-env");
  EXPECT_EQ(ResolveApiKey("sk-flag"), "sk-flag");
  ::unsetenv("OPENAI_API_KEY");
  EXPECT_EQ(ResolveApiKey(""), "");
  ClientConfig config{"sk-secret", {ParseHeader("X-Tenant: t1")}, "", true};
  EXPECT_EQ(RenderHeaderLines(config), "Authorization: Bearer sk-secret\r\nX-Tenant: t1\r\n");
  const std::string text = Describe(Url::Parse("https://h"), config);
  EXPECT_EQ(text, "TLS, certificate verification OFF (--insecure), bearer key set, extra headers: "
                  "X-Tenant");
  EXPECT_TRUE(VerificationOff(Url::Parse("https://h"), config));
  EXPECT_FALSE(VerificationOff(Url::Parse("http://h"), config));
  // An explicit Authorization header replaces the bearer line.
  config.headers.push_back(ParseHeader("Authorization: Basic abc"));
  EXPECT_EQ(RenderHeaderLines(config).find("Bearer"), std::string::npos);
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("kvgate-http-test-" + std::to_string(::getpid())));
    certs_ = new testing::TestCerts(testing::MakeTestCerts(*dir_));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    kvgate::RemoveTree(*dir_, ec);
    delete certs_;
    delete dir_;
  }
  static TestReply Models(const TestRequest&) {
    return {200, "application/json", {R"({"object":"list","data":[{"id":"m1"}]})"}, {}};
  }
  static std::string* dir_;
  static testing::TestCerts* certs_;
};
std::string* TlsTest::dir_ = nullptr;
testing::TestCerts* TlsTest::certs_ = nullptr;

TEST_F(TlsTest, VerifiedHttpsWithTheRightCaCarriesTheKeyAndHeaders) {
  TestServer server(true, *certs_, "sk-test", Models);
  ClientConfig config{"sk-test", {ParseHeader("X-Tenant: t1")}, certs_->ca_pem, false};
  Response r = Fetch(Url::Parse(server.url() + "/v1"), config, "/v1/models", "", 5000ms, "t");
  EXPECT_EQ(r.result_int(), 200u);
  EXPECT_NE(r.body().find("m1"), std::string::npos);
  // requests() returns a copy: hold it, since a range-for over a member of a temporary would
  // read freed memory (ASan found it).
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].authorization, "Bearer sk-test");
  bool tenant = false;
  for (const auto& [name, value] : requests[0].headers) tenant |= value == "t1";
  EXPECT_TRUE(tenant);
  // "localhost" is in the certificate's names too.
  Url by_name = Url::Parse("https://localhost:" + std::to_string(server.port()));
  EXPECT_EQ(Fetch(by_name, config, "/v1/models", "", 5000ms, "t").result_int(), 200u);
}

TEST_F(TlsTest, AWrongOrMissingCaIsRefusedWithTheCertificateReason) {
  TestServer server(true, *certs_, "", Models);
  const Url url = Url::Parse(server.url());
  for (const std::string& ca : {certs_->other_ca_pem, std::string()}) {
    try {
      Fetch(url, ClientConfig{"", {}, ca, false}, "/v1/models", "", 5000ms, "t");
      ADD_FAILURE() << "no error with ca '" << ca << "'";
    } catch (const TransportError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("TLS handshake with 127.0.0.1:" + std::to_string(server.port())),
                std::string::npos) << what;
      EXPECT_NE(what.find("certificate verify failed ("), std::string::npos) << what;
      EXPECT_NE(what.find("--cacert"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(server.requests().size(), 0u);  // nothing was sent over an unverified connection
  // The server notes its side of each refused handshake just after the client gave up.
  for (int i = 0; i < 200 && server.handshake_failures() < 2; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(server.handshake_failures(), 2);
}

TEST_F(TlsTest, ACertificateForAnotherNameIsRefusedNamingTheMismatch) {
  testing::TestCerts elsewhere = *certs_;
  elsewhere.server_cert_pem = certs_->wrong_name_cert_pem;
  elsewhere.server_key_pem = certs_->wrong_name_key_pem;
  TestServer server(true, elsewhere, "", Models);
  try {
    Fetch(Url::Parse(server.url()), ClientConfig{"", {}, certs_->ca_pem, false}, "/v1/models", "",
          5000ms, "t");
    ADD_FAILURE() << "a certificate for elsewhere.example was accepted for 127.0.0.1";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("certificate verify failed (IP address mismatch)"),
              std::string::npos)
        << e.what();
  }
  // The same chain with verification off: only --insecure lets it through.
  EXPECT_EQ(Fetch(Url::Parse(server.url()), ClientConfig{"", {}, "", true}, "/v1/models", "",
                  5000ms, "t")
                .result_int(),
            200u);
}

TEST_F(TlsTest, InsecureSkipsVerificationOnlyWhenAsked) {
  TestServer server(true, *certs_, "", Models);
  Response r = Fetch(Url::Parse(server.url()), ClientConfig{"", {}, "", true}, "/v1/models", "",
                     5000ms, "t");
  EXPECT_EQ(r.result_int(), 200u);
}

TEST_F(TlsTest, AMissingKeyIsAnHttpAnswerNotATransportFailure) {
  TestServer server(true, *certs_, "sk-test", Models);
  Response r = Fetch(Url::Parse(server.url()), ClientConfig{"", {}, certs_->ca_pem, false},
                     "/v1/models", "", 5000ms, "t");
  EXPECT_EQ(r.result_int(), 401u);
  EXPECT_EQ(ErrorText(r.body()), "missing or wrong API key");
}

TEST_F(TlsTest, BadCaFilesAndSchemeMismatchesAreNamed) {
  const Url url = Url::Parse("https://127.0.0.1:1");
  try {
    TlsContext context(url, ClientConfig{"", {}, *dir_ + "/absent.pem", false});
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "cacert");
    EXPECT_NE(std::string(e.what()).find("absent.pem': cannot open"), std::string::npos);
  }
  EXPECT_THROW(TlsContext(url, ClientConfig{"", {}, certs_->server_key_pem + ".none", false}),
               ConfigError);
  // https:// to a plain-HTTP server: the handshake fails and the message says why.
  TestServer plain(false, *certs_, "", Models);
  try {
    Fetch(Url::Parse("https://127.0.0.1:" + std::to_string(plain.port())),
          ClientConfig{"", {}, certs_->ca_pem, false}, "/v1/models", "", 5000ms, "t");
    ADD_FAILURE();
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("TLS handshake with 127.0.0.1:"), std::string::npos)
        << e.what();
  }
}

TEST_F(TlsTest, ConnectionRefusedNamesHostAndPort) {
  uint16_t port;
  {
    TestServer gone(false, *certs_, "", Models);
    port = gone.port();
  }
  try {
    Fetch(Url::Parse("http://127.0.0.1:" + std::to_string(port)), {}, "/v1/models", "", 5000ms,
          "t");
    ADD_FAILURE();
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect to 127.0.0.1:" + std::to_string(port) +
                                         ": Connection refused"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(TlsTest, BlockingConnectionKeepsOneTlsConnectionAliveAndReadsChunkedStreams) {
  TestServer server(true, *certs_, "", [](const TestRequest& r) {
    if (r.target == "/v1/models") return Models(r);
    return TestReply{200, "text/event-stream", testing::ChatStreamParts(3, 5), {}};
  });
  const Url url = Url::Parse(server.url());
  const ClientConfig config{"", {}, certs_->ca_pem, false};
  TlsContext tls(url, config);
  BlockingConnection connection(url, tls, 5000ms, 5000ms, 1 << 20);
  for (int i = 0; i < 3; ++i) {
    Request request = MakeRequest(url, config, boost::beast::http::verb::post,
                                  "/v1/chat/completions", "t");
    request.body() = "{}";
    request.prepare_payload();
    Response r = connection.Send(request);
    EXPECT_EQ(r.result_int(), 200u);
    EXPECT_NE(r.body().find("data: [DONE]"), std::string::npos);
  }
  EXPECT_EQ(server.requests().size(), 3u);
  EXPECT_EQ(server.handshake_failures(), 0);
}

}  // namespace
}  // namespace kvgate::http
