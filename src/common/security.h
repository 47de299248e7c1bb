// Security between the tasks of a job: TLS for every gRPC channel and server, and the job token
// that every request carries and every server checks. One process plays one task, so the
// settings are the process's: set once at start (SetSecurity) before any channel or server is
// made, or taken from the environment (PSTRAIN_AUTH_TOKEN, PSTRAIN_TLS_CERT, PSTRAIN_TLS_KEY,
// PSTRAIN_TLS_CA) the first time they are needed, so that client programs started by
// `pstrain launch` use the launcher's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace pstrain {

// Where the settings come from: files named by flags, falling back to the environment.
struct SecurityFlags {
  std::string tls_cert;         // PEM certificate of this task (server and client side)
  std::string tls_key;          // its PEM private key
  std::string tls_ca;           // PEM CA: verify peers with it; servers then require client certs
  std::string auth_token_file;  // a file holding the job token (surrounding whitespace dropped)
};

struct Security {
  std::string token;  // the job token; empty: requests carry none and servers check none
  // PEM contents. TLS is on when cert and key are set; a channel then verifies the server
  // against `ca` (or the system's roots when empty), and a server with `ca` set requires and
  // verifies a client certificate (mutual TLS).
  std::string cert, key, ca;
  bool tls() const { return !cert.empty(); }
};

// Reads the files named by `flags`; an empty flag falls back to its environment variable
// (PSTRAIN_TLS_CERT, PSTRAIN_TLS_KEY, PSTRAIN_TLS_CA, PSTRAIN_AUTH_TOKEN_FILE; the token itself
// may be given as PSTRAIN_AUTH_TOKEN). Errors name the flag and file: a file that cannot be
// read, a cert without its key, a CA without a cert, an empty token file.
absl::StatusOr<Security> LoadSecurity(const SecurityFlags& flags);

// Sets this process's security. Thread-safe; channels and servers made later use it.
void SetSecurity(Security security);
// This process's security: the last SetSecurity, else LoadSecurity({}) of the environment at
// the first call (an error there is logged and leaves security off).
std::shared_ptr<const Security> GetSecurity();

// Credentials for a channel to a peer, and for a server's listening port, per GetSecurity().
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials();
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials();
// The metadata key of the token, and its value's prefix ("authorization: Bearer <token>").
inline constexpr char kTokenMetadataKey[] = "authorization";
inline constexpr char kTokenPrefix[] = "Bearer ";

// Whether `given` equals `expected`, in time that depends only on their lengths.
bool TokenMatches(absl::string_view given, absl::string_view expected);

// OK if the call carries the job's token (or the job has none); else Unauthenticated, logged
// with the peer and `method`. Every service calls it before its handler runs (raw_call.h).
absl::Status CheckCallToken(const grpc::ServerContextBase& ctx, absl::string_view method);

}  // namespace pstrain
