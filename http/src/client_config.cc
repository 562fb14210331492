#include "kvgate/http/client_config.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "kvgate/secrets/redact.h"

namespace kvgate::http {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

std::string Url::HostPort() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + port;
}

Url Url::Parse(const std::string& raw_url) {
  // Messages name the URL with its secrets redacted; the parse reads the raw one.
  const std::string shown = "'" + secrets::RedactUrl(raw_url) + "'";
  const size_t sep = raw_url.find("://");
  Url out;
  out.scheme = Lower(sep == std::string::npos ? "" : raw_url.substr(0, sep));
  if (out.scheme != "http" && out.scheme != "https") {
    throw ConfigError("url", shown + ": expected http://host[:port][/prefix] or https://...");
  }
  const std::string rest = raw_url.substr(sep + 3);
  if (rest.find_first_of("?#") != std::string::npos) {
    throw ConfigError("url", shown + ": a base URL has no query or fragment");
  }
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string::npos) {
    throw ConfigError("url", shown + ": user info in the URL is not supported: give the key through $OPENAI_API_KEY, "
                                     "a policy's api_key_env or the --api-key option");
  }
  std::string port;
  bool has_colon = false;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) throw ConfigError("url", shown + ": unclosed '['");
    out.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw ConfigError("url", shown + ": bad text after ']'");
      port = after.substr(1);
      has_colon = true;
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      port = authority.substr(colon + 1);
      has_colon = true;
    }
  }
  if (out.host.empty()) throw ConfigError("url", shown + ": missing host");
  if (has_colon) {
    int number = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number < 1 ||
        number > 65535) {
      throw ConfigError("url", shown + ": port must be a number in 1..65535");
    }
    out.port = std::to_string(number);
  } else {
    out.port = out.tls() ? "443" : "80";
  }
  if (path.find_first_of("?#") != std::string::npos) {
    throw ConfigError("url", shown + ": a base URL has no query or fragment");
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) {
    path.resize(path.size() - 3);
  }
  out.prefix = path;
  out.host_header = authority;
  out.text = out.scheme + "://" + out.HostPort() + out.prefix;
  return out;
}

Header ParseHeader(std::string_view text) {
  const std::string shown = "'" + secrets::RedactText(text) + "'";
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    throw ConfigError("header", shown + ": expected 'Name: value'");
  }
  Header header{std::string(Trim(text.substr(0, colon))),
                std::string(Trim(text.substr(colon + 1)))};
  if (header.name.empty()) throw ConfigError("header", shown + ": the name is empty");
  for (char c : header.name) {
    if (!IsTokenChar(c)) {
      throw ConfigError("header", shown + ": '" + std::string(1, c) +
                                      "' cannot be part of a header name");
    }
  }
  if (header.value.find_first_of("\r\n") != std::string::npos || header.value.find('\0') !=
                                                                      std::string::npos) {
    throw ConfigError("header", shown + ": a header value cannot hold CR, LF or NUL");
  }
  const std::string lower = Lower(header.name);
  for (const char* reserved : {"host", "content-length", "transfer-encoding", "connection"}) {
    if (lower == reserved) {
      throw ConfigError("header", shown + ": " + header.name + " is set by the client itself");
    }
  }
  return header;
}

std::string ResolveApiKey(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("OPENAI_API_KEY");
  return env == nullptr ? "" : env;
}

std::string RenderHeaderLines(const ClientConfig& config) {
  bool own_authorization = false;
  for (const Header& h : config.headers) own_authorization |= Lower(h.name) == "authorization";
  std::string lines;
  if (!config.api_key.empty() && !own_authorization) {
    lines += "Authorization: Bearer " + config.api_key + "\r\n";
  }
  for (const Header& h : config.headers) lines += h.name + ": " + h.value + "\r\n";
  return lines;
}

std::string Describe(const Url& url, const ClientConfig& config) {
  std::string text;
  if (!url.tls()) {
    text = "plain HTTP";
  } else if (config.insecure) {
    text = "TLS, certificate verification OFF (--insecure)";
  } else if (!config.ca_file.empty()) {
    text = "TLS, certificate verified (CA file " + config.ca_file + ")";
  } else {
    text = "TLS, certificate verified (system CAs)";
  }
  if (!config.api_key.empty()) text += ", bearer key set";
  if (!config.headers.empty()) {
    text += ", extra headers: ";
    for (size_t i = 0; i < config.headers.size(); ++i) {
      text += (i ? ", " : "") + config.headers[i].name;
    }
  }
  return text;
}

}  // namespace kvgate::http

#include "kvgate/http/endpoint.h"

namespace kvgate::http {

std::string_view EndpointName(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? "chat" : "completions";
}

std::string_view EndpointPath(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

Endpoint ParseEndpoint(std::string_view text) {
  if (text == "completions") return Endpoint::kCompletions;
  if (text == "chat") return Endpoint::kChat;
  throw ConfigError("endpoint", "'" + std::string(text) + "': expected completions or chat");
}

}  // namespace kvgate::http
