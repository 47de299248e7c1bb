// Certificates for the TLS between the tasks of a job (common/security.h), made with OpenSSL's
// libcrypto: a CA, and one certificate with its key that is valid for every host of the cluster
// and that every task presents as server and as client (mutual TLS). Also the job token.
// `pstrain gen-certs` and `pstrain launch --tls` use them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

struct CertOptions {
  // Host names and IP addresses (v4 or v6) the certificate is valid for, as subject alternative
  // names; 127.0.0.1 and localhost are always among them.
  std::vector<std::string> hosts;
  // Days of validity from now, also of a new CA. Negative: the certificate expired that many
  // days ago (for tests). 0 is an error.
  int days = 365;
  // Sign with this CA (PEM; both or neither); empty: with a new one.
  std::string ca_cert, ca_key;
};

// PEM texts. EC P-256 keys, SHA-256 signatures.
struct CertBundle {
  std::string ca_cert, ca_key;  // ca_key is empty when the CA came from CertOptions
  std::string cert, key;        // the task certificate (TLS server and client) and its key
};

// A new certificate (and CA, unless given). Errors name what is wrong: a host that is neither
// an IP address nor a DNS name, 0 days, a CA that is not a CA or whose key does not match it.
absl::StatusOr<CertBundle> MakeCertificates(const CertOptions& options);

// Writes `dir`/ca.pem, cert.pem, key.pem and (when the bundle has it) ca.key, creating `dir`
// (mode 0700) if missing; the keys are written with mode 0600.
absl::Status WriteCertificates(const CertBundle& bundle, const std::string& dir);

// A new random job token: 32 bytes from OpenSSL's RAND_bytes, as 64 hex digits.
absl::StatusOr<std::string> RandomToken();

// Writes `contents` to `path`, readable and writable by its owner only (mode 0600, also when
// the file existed).
absl::Status WritePrivateFile(const std::string& path, const std::string& contents);

}  // namespace pstrain
