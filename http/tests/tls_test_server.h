// A real HTTPS (or plain HTTP) server on 127.0.0.1 for tests of kvgate::http and its users: a
// Boost.Asio/OpenSSL server with a certificate made in the test by the openssl CLI. It requires
// "Authorization: Bearer <key>" when a key is set (401 otherwise) and answers by a handler the
// test chooses; a reply may be a chunked stream whose parts are written at planned delays.
//
// Thread-safety: one accept thread and one thread per connection; public methods may be called
// from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvgate::http::testing {

// A CA, a server certificate it signed for 127.0.0.1 and localhost (subjectAltName), a second,
// unrelated CA, and a certificate of the first CA for another name only (elsewhere.example), all
// PEM in `dir` (made with the openssl CLI; throws std::runtime_error if it fails).
struct TestCerts {
  std::string ca_pem;
  std::string server_cert_pem;
  std::string server_key_pem;
  std::string other_ca_pem;
  std::string wrong_name_cert_pem;
  std::string wrong_name_key_pem;
};
TestCerts MakeTestCerts(const std::string& dir);

struct TestRequest {
  std::string method;
  std::string target;
  std::string authorization;  // the Authorization header ("" when absent)
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct TestReply {
  int status = 200;
  std::string content_type = "application/json";
  // Written in order; part k after waiting delay_ms[k] (0 when absent) from the previous one.
  // More than one part: sent with chunked transfer encoding, each part its own chunk.
  std::vector<std::string> parts;
  std::vector<double> delay_ms;
};

class TestServer {
 public:
  // tls: serve https with certs.server_cert_pem; otherwise plain http (certs unused).
  TestServer(bool tls, const TestCerts& certs, std::string required_key,
             std::function<TestReply(const TestRequest&)> handler);
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  uint16_t port() const { return port_; }
  std::string url() const;
  std::vector<TestRequest> requests() const;   // every request read, in order
  // When each part of every streamed reply was written (steady_clock ns since its epoch).
  std::vector<int64_t> part_ns() const;
  int64_t handshake_failures() const { return handshake_failures_.load(); }

 private:
  struct Impl;
  void Serve(std::shared_ptr<void> socket);
  bool tls_;
  std::string key_;
  std::function<TestReply(const TestRequest&)> handler_;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> handshake_failures_{0};
  mutable std::mutex mutex_;
  std::vector<TestRequest> requests_;
  std::vector<int64_t> part_ns_;
  std::thread accept_thread_;
  std::vector<std::thread> connection_threads_;
};

// An OpenAI chat stream of `tokens` deltas ("t0", "t1", ...) with a role chunk first and a usage
// chunk last, then [DONE]: the parts of a TestReply, one SSE event each.
std::vector<std::string> ChatStreamParts(int tokens, int prompt_tokens);

}  // namespace kvgate::http::testing
