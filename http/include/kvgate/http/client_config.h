// kvgate::http — how kvgate reaches a server: the base URL, TLS trust, credentials and extra
// headers. This header is the boost-free half of the library (kvgate/http/stream.h is the
// connection itself); loadgen/, checks/ and gates/ pass these types around.
//
// Contract:
// - A base URL is http[s]://host[:port][/prefix][/v1][/]: no user info, query or fragment; a
//   trailing "/v1" (the OpenAI base-URL habit) is dropped, so ".../v1" and "..." are one server.
//   Ports default to 80 / 443. IPv6 hosts are written in brackets.
// - https verifies the server's certificate chain (the system's CAs, or only `ca_file` when set)
//   and that the certificate names the URL's host (DNS name or IP address); SNI is sent for DNS
//   names. `insecure` turns both checks off; Describe() then says so, and every report that
//   records a run made with it carries that line.
// - `api_key` goes out as "Authorization: Bearer KEY" and nowhere else: it is never part of
//   Describe(), an error message, a record or a log line. ResolveApiKey() takes it from the
//   command line or else from $OPENAI_API_KEY (so it need not be on a command line `ps` shows).
// - Extra headers are sent verbatim on every request; only their names are ever recorded.
//
// Every function throws ConfigError naming the bad setting. Pure functions; thread-safe.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::http {

// A bad URL, header, CA file or other setting; field() names it ("url", "header", "cacert").
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string field, const std::string& what)
      : std::runtime_error(what), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

struct Url {
  std::string scheme;       // "http" | "https"
  std::string host;         // as written, without brackets for IPv6
  std::string port;         // decimal; "80" / "443" when absent
  std::string host_header;  // value of the Host header (the authority as written)
  std::string prefix;       // path before /v1, without a trailing slash ("" for the root)
  std::string text;         // normalised "scheme://host:port[prefix]", for messages and records

  bool tls() const { return scheme == "https"; }
  std::string Join(std::string_view path) const { return text + std::string(path); }
  std::string HostPort() const;  // "host:port" ("[::1]:443" for IPv6), for messages

  // Throws ConfigError("url", ...) naming the (redacted) URL and what is wrong with it.
  static Url Parse(const std::string& url);
};

struct Header {
  std::string name;
  std::string value;
};

// "Name: value" (as curl's -H). The name must be an HTTP token and not one the client sets itself
// (Host, Content-Length, Transfer-Encoding, Connection); no CR or LF anywhere. Throws
// ConfigError("header").
Header ParseHeader(std::string_view text);

struct ClientConfig {
  std::string api_key;          // sent as "Authorization: Bearer KEY" when not empty
  std::vector<Header> headers;  // sent with every request (an Authorization here wins)
  std::string ca_file;          // PEM file of CAs to trust instead of the system's ("" = system)
  bool insecure = false;        // https: skip certificate and host-name verification
};

// `flag` when not empty, else $OPENAI_API_KEY when set, else "".
std::string ResolveApiKey(const std::string& flag);

// The request header lines the config adds, each ending in CRLF: Authorization (when a key is
// set and no extra header names Authorization), then the extra headers in order.
std::string RenderHeaderLines(const ClientConfig& config);

// One line for reports: "plain HTTP", "TLS, certificate verified (system CAs)", "TLS, certificate
// verified (CA file ca.pem)" or "TLS, certificate verification OFF (--insecure)"; then
// ", bearer key set" and ", extra headers: X-A, X-B" as they apply. Never a secret.
std::string Describe(const Url& url, const ClientConfig& config);

// Whether a run over `url` with `config` skipped certificate verification.
inline bool VerificationOff(const Url& url, const ClientConfig& config) {
  return url.tls() && config.insecure;
}

}  // namespace kvgate::http
