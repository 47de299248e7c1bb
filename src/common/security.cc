#include "common/security.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The contents of `path`, named by `what` in errors.
absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  if (s.str().empty())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is empty"));
  return s.str();
}

struct State {
  absl::Mutex mu;
  bool set ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<const Security> security ABSL_GUARDED_BY(mu);
};

State& TheState() {
  static State* state = new State;  // never destroyed: channels may be made during exit
  return *state;
}

}  // namespace

absl::StatusOr<Security> LoadSecurity(const SecurityFlags& flags) {
  struct File {
    std::string path;
    const char* flag;
    std::string* out;
  };
  Security s;
  std::string token_file = flags.auth_token_file;
  const char* token_flag = "--auth_token_file";
  if (token_file.empty()) {
    token_file = Env("PSTRAIN_AUTH_TOKEN_FILE");
    token_flag = "PSTRAIN_AUTH_TOKEN_FILE";
  }
  const File files[] = {
      {flags.tls_cert.empty() ? Env("PSTRAIN_TLS_CERT") : flags.tls_cert,
       flags.tls_cert.empty() ? "PSTRAIN_TLS_CERT" : "--tls_cert", &s.cert},
      {flags.tls_key.empty() ? Env("PSTRAIN_TLS_KEY") : flags.tls_key,
       flags.tls_key.empty() ? "PSTRAIN_TLS_KEY" : "--tls_key", &s.key},
      {flags.tls_ca.empty() ? Env("PSTRAIN_TLS_CA") : flags.tls_ca,
       flags.tls_ca.empty() ? "PSTRAIN_TLS_CA" : "--tls_ca", &s.ca},
      {token_file, token_flag, &s.token},
  };
  for (const File& f : files) {
    if (f.path.empty()) continue;
    absl::StatusOr<std::string> text = ReadPem(f.path, f.flag);
    if (!text.ok()) return text.status();
    *f.out = *std::move(text);
  }
  if (token_file.empty()) s.token = Env("PSTRAIN_AUTH_TOKEN");
  s.token = std::string(absl::StripAsciiWhitespace(s.token));
  if (!token_file.empty() && s.token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(token_flag, ": ", token_file, " holds no token"));
  }
  if (s.cert.empty() != s.key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both, or neither for plaintext");
  }
  if (!s.ca.empty() && s.cert.empty()) {
    return absl::InvalidArgumentError("--tls_ca needs --tls_cert and --tls_key");
  }
  return s;
}

void SetSecurity(Security security) {
  State& st = TheState();
  absl::MutexLock lock(&st.mu);
  st.security = std::make_shared<const Security>(std::move(security));
  st.set = true;
}

std::shared_ptr<const Security> GetSecurity() {
  State& st = TheState();
  absl::MutexLock lock(&st.mu);
  if (!st.set) {
    absl::StatusOr<Security> env = LoadSecurity({});
    st.security = std::make_shared<const Security>(env.ok() ? *std::move(env) : Security{});
    if (!env.ok()) {
      spdlog::error("security from the environment is not usable, so it is off: {}",
                    std::string(env.status().message()));
    }
    st.set = true;
  }
  return st.security;
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials() {
  const std::shared_ptr<const Security> sp = GetSecurity();
  const Security& s = *sp;
  if (!s.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = s.ca;
  o.pem_private_key = s.key;
  o.pem_cert_chain = s.cert;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials() {
  const std::shared_ptr<const Security> sp = GetSecurity();
  const Security& s = *sp;
  if (!s.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(
      s.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = s.ca;
  o.pem_key_cert_pairs.push_back({s.key, s.cert});
  return grpc::SslServerCredentials(o);
}

bool TokenMatches(absl::string_view given, absl::string_view expected) {
  // Every byte of `expected` is compared whatever the outcome, so the time says nothing about
  // how much of a guess was right.
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? given[i] : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

absl::Status CheckCallToken(const grpc::ServerContextBase& ctx, absl::string_view method) {
  const std::shared_ptr<const Security> sp = GetSecurity();
  const Security& s = *sp;
  if (s.token.empty()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  const char* why = "carries no job token";
  if (it != md.end()) {
    const absl::string_view value(it->second.data(), it->second.size());
    const absl::string_view prefix(kTokenPrefix);
    if (value.substr(0, prefix.size()) == prefix &&
        TokenMatches(value.substr(prefix.size()), s.token)) {
      return absl::OkStatus();
    }
    why = "carries a wrong job token";
  }
  spdlog::warn("refused {} from {}: the request {}", std::string(method), ctx.peer(), why);
  return absl::UnauthenticatedError(
      absl::StrCat(method, " refused: the request ", why, " (\"authorization: Bearer <token>\")"));
}

}  // namespace pstrain
