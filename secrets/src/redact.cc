#include "kvgate/secrets/redact.h"

#include <array>
#include <cctype>

namespace kvgate::secrets {
namespace {

bool IsAlpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool IsSpace(char c) { return c == ' ' || c == '\t'; }

// Lower case, '-' as '_': "X-API-Key" and "x_api_key" are one name.
std::string Normalized(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    out += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

// Characters that may continue a URL in running text: not white space, quotes or angle brackets
// (which end a URL written in prose, JSON, TOML or HTML).
bool IsUrlChar(char c) {
  return static_cast<unsigned char>(c) > ' ' && c != '"' && c != '\'' && c != '<' && c != '>' &&
         c != '`' && c != '\\';
}

bool IsSchemeChar(char c) { return IsAlnum(c) || c == '+' || c == '-' || c == '.'; }

// A token of a credential: what follows "Bearer " (RFC 6750's b64token) or an unquoted value.
bool IsTokenChar(char c) {
  return IsAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' ||
         c == '=' || c == ':' || c == '@' || c == '!' || c == '$' || c == '%' || c == '*';
}

bool IsNameChar(char c) { return IsAlnum(c) || c == '_' || c == '-'; }

std::string RedactQuery(std::string_view query) {
  std::string out;
  size_t begin = 0;
  while (begin <= query.size()) {
    size_t end = query.find('&', begin);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view part = query.substr(begin, end - begin);
    const size_t eq = part.find('=');
    if (!out.empty() || begin > 0) out += '&';
    if (eq != std::string_view::npos) {
      const std::string_view name = part.substr(0, eq);
      const std::string norm = Normalized(name);
      if (IsSecretName(name) || norm == "key" || norm == "sig" || norm == "code") {
        out += std::string(name) + "=" + std::string(kRedacted);
      } else {
        out += part;
      }
    } else {
      out += part;
    }
    begin = end + 1;
  }
  return out;
}

}  // namespace

bool IsSecretName(std::string_view name) {
  const std::string n = Normalized(name);
  if (n.empty()) return false;
  static constexpr std::array<std::string_view, 4> kExact = {"auth", "pwd", "passwd", "pass"};
  for (std::string_view exact : kExact) {
    if (n == exact) return true;
  }
  static constexpr std::array<std::string_view, 15> kSuffixes = {
      "_key",      "apikey",     "token",     "secret",    "password",
      "passwd",    "passphrase", "authorization", "credential", "credentials",
      "signature", "cookie",     "privatekey", "accesskey", "secretkey"};
  for (std::string_view suffix : kSuffixes) {
    if (EndsWith(n, suffix)) return true;
  }
  return false;
}

std::string RedactUrl(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0 || !IsAlpha(url[0])) return std::string(url);
  for (size_t i = 0; i < sep; ++i) {
    if (!IsSchemeChar(url[i])) return std::string(url);
  }
  const size_t authority_begin = sep + 3;
  size_t authority_end = url.find_first_of("/?#", authority_begin);
  if (authority_end == std::string_view::npos) authority_end = url.size();
  std::string out(url.substr(0, authority_begin));
  const std::string_view authority = url.substr(authority_begin, authority_end - authority_begin);
  const size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    const size_t colon = userinfo.find(':');
    out += colon == std::string_view::npos
               ? std::string(kRedacted)
               : std::string(userinfo.substr(0, colon)) + ":" + std::string(kRedacted);
    out += authority.substr(at);
  } else {
    out += authority;
  }
  const std::string_view rest = url.substr(authority_end);
  const size_t q = rest.find('?');
  if (q == std::string_view::npos) return out + std::string(rest);
  size_t fragment = rest.find('#', q);
  if (fragment == std::string_view::npos) fragment = rest.size();
  out += rest.substr(0, q + 1);
  out += RedactQuery(rest.substr(q + 1, fragment - q - 1));
  out += rest.substr(fragment);
  return out;
}

std::string RedactText(std::string_view text) {
  // Pass 1: URLs.
  std::string pass1;
  pass1.reserve(text.size());
  size_t copied = 0;
  for (size_t sep = text.find("://"); sep != std::string_view::npos;
       sep = text.find("://", sep + 3)) {
    size_t begin = sep;
    while (begin > copied && IsSchemeChar(text[begin - 1])) --begin;
    while (begin < sep && !IsAlpha(text[begin])) ++begin;  // a scheme starts with a letter
    if (begin == sep) continue;
    size_t end = sep + 3;
    while (end < text.size() && IsUrlChar(text[end])) ++end;
    pass1 += text.substr(copied, begin - copied);
    pass1 += RedactUrl(text.substr(begin, end - begin));
    copied = end;
    sep = end > 3 ? end - 3 : 0;
  }
  pass1 += text.substr(copied);

  // Pass 2: credentials after an authorization scheme, and values assigned to secret names.
  std::string out;
  out.reserve(pass1.size());
  const std::string_view in = pass1;
  size_t i = 0;
  auto redact_value = [&](size_t at) -> size_t {  // writes the value at `at`, returns its end
    size_t j = at;
    if (j < in.size() && (in[j] == '"' || in[j] == '\'')) {
      const char quote = in[j];
      size_t close = j + 1;
      while (close < in.size() && in[close] != quote && in[close] != '\n') {
        close += in[close] == '\\' && close + 1 < in.size() ? 2 : 1;
      }
      if (close >= in.size() || in[close] != quote) return j;  // not a closed string: leave it
      out += quote;
      out += kRedacted;
      out += quote;
      return close + 1;
    }
    // An unquoted value; an authorization scheme word before it stays readable.
    for (std::string_view scheme : {std::string_view("Bearer "), std::string_view("Basic ")}) {
      if (StartsWithNoCase(in.substr(j), scheme)) {
        out += in.substr(j, scheme.size());
        j += scheme.size();
        break;
      }
    }
    size_t end = j;
    while (end < in.size() && IsTokenChar(in[end])) ++end;
    const std::string_view value = in.substr(j, end - j);
    // JSON's literals say there is no secret; redacting them would break the document.
    if (value.empty() || value == "null" || value == "true" || value == "false") return j;
    out += kRedacted;
    return end;
  };
  while (i < in.size()) {
    // "Bearer <token>" anywhere (the scheme word as HTTP writes it; tokens of 8 or more
    // characters, so prose such as "Bearer of news" is left alone).
    constexpr std::string_view kBearer = "Bearer ";
    if ((i == 0 || !IsNameChar(in[i - 1])) && in.substr(i, kBearer.size()) == kBearer) {
      size_t end = i + kBearer.size();
      while (end < in.size() && IsTokenChar(in[end])) ++end;
      if (end - i - kBearer.size() >= 8) {
        out += kBearer;
        out += kRedacted;
        i = end;
        continue;
      }
    }
    if (!IsNameChar(in[i]) || (i > 0 && IsNameChar(in[i - 1]))) {
      out += in[i++];
      continue;
    }
    size_t name_end = i;
    while (name_end < in.size() && IsNameChar(in[name_end])) ++name_end;
    const std::string_view name = in.substr(i, name_end - i);
    std::string_view bare = name;
    while (!bare.empty() && bare.front() == '-') bare.remove_prefix(1);
    out += name;
    i = name_end;
    if (!IsSecretName(bare)) continue;
    // What separates the name from its value: a closing quote of a JSON key, spaces, then '=' or
    // ':' (TOML, JSON, HTTP header, key=value) or, after a "--flag", a space.
    size_t j = i;
    if (j < in.size() && (in[j] == '"' || in[j] == '\'')) ++j;
    while (j < in.size() && IsSpace(in[j])) ++j;
    const bool flag = name.size() > 2 && name[0] == '-' && name[1] == '-';
    if (j < in.size() && (in[j] == '=' || in[j] == ':')) {
      ++j;
    } else if (!(flag && j > i)) {
      continue;
    }
    while (j < in.size() && IsSpace(in[j])) ++j;
    out += in.substr(i, j - i);
    i = redact_value(j);
  }
  return out;
}

}  // namespace kvgate::secrets
