#include "tls_test_server.h"

#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace kvgate::http::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

void Shell(const std::string& command) {
  if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) {
    throw std::runtime_error("test certificate command failed: " + command);
  }
}

void MakeCa(const std::string& dir, const std::string& name) {
  Shell("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=" + name + "' -keyout '" +
        dir + "/" + name + ".key' -out '" + dir + "/" + name + ".pem'");
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A key and a certificate signed by dir/ca for the subjectAltName `names`, as dir/NAME.{key,pem}.
void MakeLeaf(const std::string& dir, const std::string& name, const std::string& names) {
  // The names the client checks (written here: Shell() sends stdout to /dev/null).
  const std::string ext = dir + "/" + name + ".ext";
  std::ofstream(ext) << "subjectAltName=" << names << "\n";
  Shell("openssl req -newkey rsa:2048 -nodes -subj '/CN=" + name + "' -keyout '" + dir + "/" +
        name + ".key' -out '" + dir + "/" + name + ".csr'");
  Shell("openssl x509 -req -in '" + dir + "/" + name + ".csr' -CA '" + dir + "/ca.pem' -CAkey '" +
        dir + "/ca.key' -CAcreateserial -days 2 -extfile '" + ext + "' -out '" + dir + "/" +
        name + ".pem'");
}

}  // namespace

TestCerts MakeTestCerts(const std::string& dir) {
  std::filesystem::create_directories(dir);
  MakeCa(dir, "ca");
  MakeCa(dir, "other-ca");
  MakeLeaf(dir, "server", "IP:127.0.0.1,DNS:localhost");
  MakeLeaf(dir, "elsewhere", "DNS:elsewhere.example");
  return {dir + "/ca.pem",        dir + "/server.pem",    dir + "/server.key",
          dir + "/other-ca.pem",  dir + "/elsewhere.pem", dir + "/elsewhere.key"};
}

struct TestServer::Impl {
  asio::io_context io;
  asio::ssl::context ssl{asio::ssl::context::tls_server};
  tcp::acceptor acceptor{io};
  std::mutex fds_mutex;
  std::vector<int> fds;
};

TestServer::TestServer(bool tls, const TestCerts& certs, std::string required_key,
                       std::function<TestReply(const TestRequest&)> handler)
    : tls_(tls), key_(std::move(required_key)), handler_(std::move(handler)),
      impl_(std::make_unique<Impl>()) {
  if (tls_) {
    impl_->ssl.use_certificate_chain_file(certs.server_cert_pem);
    impl_->ssl.use_private_key_file(certs.server_key_pem, asio::ssl::context::pem);
  }
  tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  accept_thread_ = std::thread([this] {
    while (!stop_) {
      auto socket = std::make_shared<tcp::socket>(impl_->io);
      boost::system::error_code ec;
      impl_->acceptor.accept(*socket, ec);
      if (ec || stop_) break;
      {
        std::lock_guard<std::mutex> lock(impl_->fds_mutex);
        impl_->fds.push_back(socket->native_handle());
      }
      std::lock_guard<std::mutex> lock(mutex_);
      connection_threads_.emplace_back([this, socket] { Serve(socket); });
    }
  });
}

TestServer::~TestServer() {
  stop_ = true;
  {  // Wake the blocking accept() with a connection of our own.
    asio::io_context io;
    tcp::socket wake(io);
    boost::system::error_code ignored;
    wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ignored);
    accept_thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(impl_->fds_mutex);
    for (int fd : impl_->fds) ::shutdown(fd, SHUT_RDWR);
  }
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    threads.swap(connection_threads_);
  }
  for (std::thread& t : threads) t.join();
}

std::string TestServer::url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

std::vector<TestRequest> TestServer::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requests_;
}

std::vector<int64_t> TestServer::part_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return part_ns_;
}

void TestServer::Serve(std::shared_ptr<void> opaque) {
  auto socket = std::static_pointer_cast<tcp::socket>(opaque);
  boost::system::error_code ec;
  socket->set_option(tcp::no_delay(true), ec);
  std::optional<asio::ssl::stream<tcp::socket&>> tls;
  if (tls_) {
    tls.emplace(*socket, impl_->ssl);
    tls->handshake(asio::ssl::stream_base::server, ec);
    if (ec) {
      ++handshake_failures_;
      return;
    }
  }
  auto write = [&](const std::string& bytes) {
    return tls ? asio::write(*tls, asio::buffer(bytes), ec)
               : asio::write(*socket, asio::buffer(bytes), ec);
  };
  beast::flat_buffer buffer;
  while (!stop_) {
    bhttp::request<bhttp::string_body> raw;
    if (tls) {
      bhttp::read(*tls, buffer, raw, ec);
    } else {
      bhttp::read(*socket, buffer, raw, ec);
    }
    if (ec) return;
    TestRequest request{std::string(raw.method_string()), std::string(raw.target()),
                        std::string(raw[bhttp::field::authorization]), {}, raw.body()};
    for (const auto& field : raw) {
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.push_back(request);
    }
    TestReply reply;
    if (!key_.empty() && request.authorization != "Bearer " + key_) {
      reply.status = 401;
      reply.parts = {R"({"error": {"message": "missing or wrong API key", "code": 401}})"};
    } else {
      reply = handler_(request);
    }
    std::ostringstream head;
    head << "HTTP/1.1 " << reply.status << " X\r\nContent-Type: " << reply.content_type << "\r\n";
    if (reply.parts.size() == 1) {
      head << "Content-Length: " << reply.parts[0].size() << "\r\n\r\n" << reply.parts[0];
      write(head.str());
      continue;
    }
    head << "Transfer-Encoding: chunked\r\n\r\n";
    write(head.str());
    for (size_t k = 0; k < reply.parts.size() && !ec; ++k) {
      if (k < reply.delay_ms.size() && reply.delay_ms[k] > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(
            static_cast<int64_t>(reply.delay_ms[k] * 1000)));
      }
      std::ostringstream chunk;
      chunk << std::hex << reply.parts[k].size() << "\r\n" << reply.parts[k] << "\r\n";
      write(chunk.str());
      std::lock_guard<std::mutex> lock(mutex_);
      part_ns_.push_back(NowNs());
    }
    write("0\r\n\r\n");
    if (ec) return;
  }
}

std::vector<std::string> ChatStreamParts(int tokens, int prompt_tokens) {
  auto event = [](const nlohmann::json& data) { return "data: " + data.dump() + "\n\n"; };
  nlohmann::json base = {{"id", "chatcmpl-1"}, {"object", "chat.completion.chunk"},
                         {"model", "test-model"}};
  std::vector<std::string> parts;
  nlohmann::json role = base;
  role["choices"] = {{{"index", 0}, {"delta", {{"role", "assistant"}}}}};
  parts.push_back(event(role));
  for (int i = 0; i < tokens; ++i) {
    nlohmann::json chunk = base;
    chunk["choices"] = {{{"index", 0}, {"delta", {{"content", "t" + std::to_string(i)}}}}};
    parts.push_back(event(chunk));
  }
  nlohmann::json usage = base;
  usage["choices"] = nlohmann::json::array();
  usage["usage"] = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", tokens},
                    {"total_tokens", prompt_tokens + tokens}};
  parts.push_back(event(usage) + "data: [DONE]\n\n");
  return parts;
}

}  // namespace kvgate::http::testing
