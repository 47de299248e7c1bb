#include "runtime/launch_secrets.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "runtime/certs.h"

namespace pstrain {

absl::StatusOr<LaunchSecrets> LaunchSecrets::Make(const std::string& dir,
                                                  const std::string& token_file, bool tls) {
  LaunchSecrets s;
  if (!dir.empty()) s.dir_ = std::filesystem::absolute(dir).string();
  if (!token_file.empty()) {
    SecurityFlags flags;
    flags.auth_token_file = token_file;
    absl::StatusOr<Security> read = LoadSecurity(flags);
    if (!read.ok()) return read.status();
    s.token_ = read->token;
    s.token_file_ = std::filesystem::absolute(token_file).string();
  } else {
    absl::StatusOr<std::string> token = RandomToken();
    if (!token.ok()) return token.status();
    s.token_ = *token;
    absl::StatusOr<std::string> path = s.Write("auth_token", s.token_ + "\n");
    if (!path.ok()) return path.status();
    s.token_file_ = *path;
  }
  if (!tls) return s;
  CertOptions options;
  options.days = 7;
  absl::StatusOr<CertBundle> bundle = MakeCertificates(options);
  if (!bundle.ok()) return bundle.status();
  if (!s.dir_.empty()) {
    bundle->ca_key.clear();  // nothing more is signed with it
    const std::string tls_dir = s.dir_ + "/tls";
    if (absl::Status w = WriteCertificates(*bundle, tls_dir); !w.ok()) return w;
    s.ca_ = tls_dir + "/ca.pem";
    s.cert_ = tls_dir + "/cert.pem";
    s.key_ = tls_dir + "/key.pem";
    return s;
  }
  const std::pair<const char*, std::string*> files[] = {
      {"ca.pem", &s.ca_}, {"cert.pem", &s.cert_}, {"key.pem", &s.key_}};
  const std::string* texts[] = {&bundle->ca_cert, &bundle->cert, &bundle->key};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> path = s.Write(files[i].first, *texts[i]);
    if (!path.ok()) return path.status();
    *files[i].second = *path;
  }
  return s;
}

absl::StatusOr<std::string> LaunchSecrets::Write(const std::string& name,
                                                 const std::string& contents) {
  if (!dir_.empty()) {
    const std::string path = absl::StrCat(dir_, "/", name);
    if (absl::Status w = WritePrivateFile(path, contents); !w.ok()) return w;
    return path;
  }
  // Not close-on-exec: every task started later inherits it.
  const int fd = memfd_create(absl::StrCat("pstrain-", name).c_str(), 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create a memory file for ", name, ": ", strerror(errno)));
  }
  fds_.push_back(fd);
  for (size_t done = 0; done < contents.size();) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot write the memory file ", name, ": ", strerror(errno)));
    }
    done += n;
  }
  return absl::StrCat("/dev/fd/", fd);
}

LaunchSecrets::LaunchSecrets(LaunchSecrets&& other) noexcept
    : dir_(std::move(other.dir_)),
      fds_(std::move(other.fds_)),
      token_(std::move(other.token_)),
      token_file_(std::move(other.token_file_)),
      ca_(std::move(other.ca_)),
      cert_(std::move(other.cert_)),
      key_(std::move(other.key_)) {
  other.fds_.clear();
}

LaunchSecrets::~LaunchSecrets() {
  for (int fd : fds_) close(fd);
}

std::vector<std::string> LaunchSecrets::TaskFlags() const {
  std::vector<std::string> flags = {"--auth_token_file", token_file_};
  if (tls()) flags.insert(flags.end(), {"--tls_cert", cert_, "--tls_key", key_, "--tls_ca", ca_});
  return flags;
}

std::vector<std::string> LaunchSecrets::Environment() const {
  std::vector<std::string> env = {"PSTRAIN_AUTH_TOKEN_FILE", "PSTRAIN_AUTH_TOKEN=" + token_};
  if (tls()) {
    env.insert(env.end(),
               {"PSTRAIN_TLS_CERT=" + cert_, "PSTRAIN_TLS_KEY=" + key_, "PSTRAIN_TLS_CA=" + ca_});
  } else {
    env.insert(env.end(), {"PSTRAIN_TLS_CERT", "PSTRAIN_TLS_KEY", "PSTRAIN_TLS_CA"});
  }
  return env;
}

}  // namespace pstrain
