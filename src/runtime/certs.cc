#include "runtime/certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using CertPtr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;

constexpr long kDay = 24 * 3600;

// `what` failed, with OpenSSL's first queued error.
absl::Status OpenSslError(const std::string& what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error(); e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return absl::InternalError(absl::StrCat(what, ": ", buf));
}

bool IsIp(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// A DNS name: dot-separated labels of letters, digits and '-', a leading "*." allowed.
bool IsDnsName(const std::string& host) {
  std::string name = host.rfind("*.", 0) == 0 ? host.substr(2) : host;
  if (name.empty() || name.size() > 253) return false;
  size_t label = 0;
  for (char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if (absl::ascii_isalnum(c) || c == '-') {
      if (++label > 63) return false;
    } else {
      return false;
    }
  }
  return label > 0;
}

// "IP:127.0.0.1,DNS:localhost,..." for the hosts, each once.
absl::StatusOr<std::string> AltNames(const std::vector<std::string>& hosts) {
  std::vector<std::string> names = {"IP:127.0.0.1", "DNS:localhost"};
  for (const std::string& h : hosts) {
    std::string name;
    if (IsIp(h)) {
      name = "IP:" + h;
    } else if (IsDnsName(h)) {
      name = "DNS:" + h;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("host \"", h, "\" is neither an IP address nor a DNS name"));
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return absl::StrJoin(names, ",");
}

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("cannot make an EC P-256 key");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(absl::StrCat("certificate extension ", value));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return added == 1 ? absl::OkStatus() : OpenSslError("cannot add a certificate extension");
}

// A certificate for `key` named `cn`, signed by `issuer` with `issuer_key` (itself when null),
// valid per `days` (CertOptions::days), with the extensions `exts` (nid, value).
absl::StatusOr<CertPtr> NewCert(EVP_PKEY* key, const std::string& cn, X509* issuer,
                                EVP_PKEY* issuer_key, int days,
                                const std::vector<std::pair<int, std::string>>& exts) {
  CertPtr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return OpenSslError("X509_new");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return OpenSslError("RAND_bytes");
  serial[0] &= 0x7f;  // a positive serial number
  BnPtr bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) == nullptr)
    return OpenSslError("serial number");
  // An hour back for clocks that differ; an expired one ends `-days` days ago.
  const long not_after = days * kDay;
  const long not_before = days > 0 ? -3600 : not_after - kDay;
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), not_before);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("pstrain"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* signer = issuer == nullptr ? cert.get() : issuer;
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1)
    return OpenSslError("certificate names");
  for (const auto& [nid, value] : exts) {
    if (absl::Status s = AddExtension(cert.get(), signer, nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), issuer_key == nullptr ? key : issuer_key, EVP_sha256()) == 0)
    return OpenSslError("cannot sign the certificate");
  return cert;
}

template <typename Write>
absl::StatusOr<std::string> Pem(Write write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) return OpenSslError("cannot write PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, n);
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  return Pem([cert](BIO* b) { return PEM_write_bio_X509(b, cert); });
}
absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  return Pem([key](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}

// The CA of `options`, parsed and checked.
absl::Status LoadCa(const CertOptions& options, CertPtr* cert, KeyPtr* key) {
  BioPtr cb(BIO_new_mem_buf(options.ca_cert.data(), static_cast<int>(options.ca_cert.size())));
  cert->reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!*cert) return absl::InvalidArgumentError("the CA certificate is not a PEM certificate");
  BioPtr kb(BIO_new_mem_buf(options.ca_key.data(), static_cast<int>(options.ca_key.size())));
  key->reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!*key) return absl::InvalidArgumentError("the CA key is not an unencrypted PEM private key");
  if (X509_check_ca(cert->get()) < 1)
    return absl::InvalidArgumentError("the CA certificate is not one of a CA");
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the CA key does not belong to the CA certificate");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CertBundle> MakeCertificates(const CertOptions& options) {
  if (options.days == 0) {
    return absl::InvalidArgumentError("0 days of validity: give a positive number of days");
  }
  if (options.ca_cert.empty() != options.ca_key.empty()) {
    return absl::InvalidArgumentError("the CA's certificate and key go together");
  }
  absl::StatusOr<std::string> alt_names = AltNames(options.hosts);
  if (!alt_names.ok()) return alt_names.status();
  CertBundle bundle;
  CertPtr ca;
  KeyPtr ca_key;
  if (!options.ca_cert.empty()) {
    if (absl::Status s = LoadCa(options, &ca, &ca_key); !s.ok()) return s;
    bundle.ca_cert = options.ca_cert;
  } else {
    absl::StatusOr<KeyPtr> k = NewKey();
    if (!k.ok()) return k.status();
    ca_key = *std::move(k);
    unsigned char id[4];
    RAND_bytes(id, sizeof(id));
    const std::string cn = absl::StrCat(
        "pstrain job CA ",
        absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(id), sizeof(id))));
    absl::StatusOr<CertPtr> c = NewCert(ca_key.get(), cn, nullptr, nullptr, options.days,
                                        {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                         {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                         {NID_subject_key_identifier, "hash"}});
    if (!c.ok()) return c.status();
    ca = *std::move(c);
    absl::StatusOr<std::string> ca_pem = CertPem(ca.get()), key_pem = KeyPem(ca_key.get());
    if (!ca_pem.ok()) return ca_pem.status();
    if (!key_pem.ok()) return key_pem.status();
    bundle.ca_cert = *ca_pem;
    bundle.ca_key = *key_pem;
  }
  absl::StatusOr<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<CertPtr> cert =
      NewCert(key->get(), "pstrain task", ca.get(), ca_key.get(), options.days,
              {{NID_basic_constraints, "critical,CA:FALSE"},
               {NID_key_usage, "critical,digitalSignature,keyAgreement"},
               {NID_ext_key_usage, "serverAuth,clientAuth"},
               {NID_subject_alt_name, *alt_names},
               {NID_subject_key_identifier, "hash"},
               {NID_authority_key_identifier, "keyid"}});
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> cert_pem = CertPem(cert->get()), key_pem = KeyPem(key->get());
  if (!cert_pem.ok()) return cert_pem.status();
  if (!key_pem.ok()) return key_pem.status();
  bundle.cert = *cert_pem;
  bundle.key = *key_pem;
  return bundle;
}

absl::Status WritePrivateFile(const std::string& path, const std::string& contents) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  bool ok = fchmod(fd, 0600) == 0;
  for (size_t done = 0; ok && done < contents.size();) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    ok = n > 0;
    if (ok) done += n;
  }
  const int err = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", strerror(err)));
  return absl::OkStatus();
}

absl::Status WriteCertificates(const CertBundle& bundle, const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
    chmod(dir.c_str(), 0700);
  }
  const std::pair<const char*, const std::string*> files[] = {{"ca.pem", &bundle.ca_cert},
                                                              {"ca.key", &bundle.ca_key},
                                                              {"cert.pem", &bundle.cert},
                                                              {"key.pem", &bundle.key}};
  for (const auto& [name, text] : files) {
    if (text->empty()) continue;
    if (absl::Status s = WritePrivateFile(absl::StrCat(dir, "/", name), *text); !s.ok()) return s;
  }
  // Certificates are public; only the keys stay private.
  chmod(absl::StrCat(dir, "/ca.pem").c_str(), 0644);
  chmod(absl::StrCat(dir, "/cert.pem").c_str(), 0644);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RandomToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return OpenSslError("cannot make a job token");
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace pstrain
