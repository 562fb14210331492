// Redaction of credentials in text kvgate writes (secrets/README.md). Pure functions of their
// input; thread-safe. Redaction keeps the text's shape (a URL stays a URL, a TOML line stays a
// valid line) and replaces only the secret with kRedacted, so redacted text can still be read,
// compared and parsed.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::secrets {

inline constexpr std::string_view kRedacted = "REDACTED";

// One URL: the password of its user info (`scheme://user:pw@host` -> `user:REDACTED@host`), a
// user info without a password (a bare token, `scheme://TOKEN@host` -> `REDACTED@host`), and the
// values of query parameters whose names carry a secret (key, token, secret, password,
// signature, auth, credential, ... in any case: `?api_key=x` -> `?api_key=REDACTED`). Anything
// that is not a URL with one of these comes back unchanged.
std::string RedactUrl(std::string_view url);

// Any text (a log line, an error message, a policy's TOML, a JSON document): every URL in it as
// RedactUrl does; the token after "Bearer " and "Basic "; and the value of an assignment to a
// secret-named key in TOML, JSON, header or command-line form (`api_key = "x"`,
// `"api_key": "x"`, `Authorization: x`, `X-Api-Key: x`, `--api-key x`, `--api-key=x`).
std::string RedactText(std::string_view text);

// Whether a key or header name names a secret (the rule both functions use), e.g. "api_key",
// "Authorization", "X-API-Key", "password", "access_token".
bool IsSecretName(std::string_view name);

}  // namespace kvgate::secrets
