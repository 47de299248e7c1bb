// Internal to src/runtime: the job token and TLS files of one `pstrain launch`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

class LaunchSecrets {
 public:
  // The token read from `token_file`, or a new random one written to `dir`/auth_token (mode
  // 0600); with `tls`, a new CA and certificate for 127.0.0.1 in `dir`/tls (its key is not
  // kept). An empty `dir` (a launch without logs, whose tasks are all `pstrain server`): the
  // files are anonymous memory files (memfd) that the tasks inherit and read as /dev/fd/N, so
  // nothing is left on disk even when the launcher is killed. Errors name the file.
  static absl::StatusOr<LaunchSecrets> Make(const std::string& dir, const std::string& token_file,
                                            bool tls);
  LaunchSecrets(LaunchSecrets&& other) noexcept;
  LaunchSecrets& operator=(LaunchSecrets&&) = delete;
  ~LaunchSecrets();

  const std::string& token() const { return token_; }
  const std::string& token_file() const { return token_file_; }
  bool tls() const { return !cert_.empty(); }
  // The flags of a `pstrain server` task: --auth_token_file F, and with TLS --tls_cert,
  // --tls_key and --tls_ca.
  std::vector<std::string> TaskFlags() const;
  // The environment every task gets, for programs that are no `pstrain server` (a worker
  // command reads it through GetSecurity): PSTRAIN_AUTH_TOKEN, and PSTRAIN_TLS_CERT/KEY/CA
  // with TLS. Inherited security variables are dropped ("NAME" without "="; EnvironmentWith).
  std::vector<std::string> Environment() const;

 private:
  LaunchSecrets() = default;
  // Writes `contents` as file `name` of the secrets; its path for the tasks.
  absl::StatusOr<std::string> Write(const std::string& name, const std::string& contents);

  std::string dir_;       // where the files are, or "" for memory files
  std::vector<int> fds_;  // the memory files, open until the end
  std::string token_, token_file_;
  std::string ca_, cert_, key_;  // paths
};

}  // namespace pstrain
