#include "cli/gen_certs.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "runtime/certs.h"

namespace pstrain {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

GenCertsCommand::GenCertsCommand(CLI::App* app)
    : cmd_(app->add_subcommand("gen-certs",
                               "write a CA (ca.pem, ca.key) and one certificate (cert.pem, "
                               "key.pem) valid for every host of a cluster, for mutual TLS")) {
  cmd_->add_option("--out", out_, "the directory to write (created if missing)")->required();
  cmd_->add_option("--hosts", hosts_,
                   "comma-separated host names and IP addresses of the cluster's tasks "
                   "(127.0.0.1 and localhost are always included)");
  cmd_->add_option("--days", days_, "days of validity (negative: already expired, for tests)")
      ->capture_default_str();
  cmd_->add_option("--ca_cert", ca_cert_,
                   "sign with this CA certificate (PEM) instead of a new CA");
  cmd_->add_option("--ca_key", ca_key_, "the private key (PEM) of --ca_cert");
}

int GenCertsCommand::Run() const {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "pstrain gen-certs: error: %s\n", std::string(s.message()).c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  CertOptions options;
  options.days = days_;
  for (absl::string_view h : absl::StrSplit(hosts_, ',', absl::SkipWhitespace())) {
    options.hosts.emplace_back(absl::StripAsciiWhitespace(h));
  }
  if (ca_cert_.empty() != ca_key_.empty()) {
    return fail(absl::InvalidArgumentError("--ca_cert and --ca_key go together"));
  }
  if (!ca_cert_.empty()) {
    absl::StatusOr<std::string> cert = ReadFile(ca_cert_, "--ca_cert");
    if (!cert.ok()) return fail(cert.status());
    absl::StatusOr<std::string> key = ReadFile(ca_key_, "--ca_key");
    if (!key.ok()) return fail(key.status());
    options.ca_cert = *cert;
    options.ca_key = *key;
  }
  absl::StatusOr<CertBundle> bundle = MakeCertificates(options);
  if (!bundle.ok()) return fail(bundle.status());
  if (absl::Status s = WriteCertificates(*bundle, out_); !s.ok()) return fail(s);
  nlohmann::json j = {{"ca", out_ + "/ca.pem"},
                      {"cert", out_ + "/cert.pem"},
                      {"key", out_ + "/key.pem"},
                      {"hosts", options.hosts},
                      {"days", days_}};
  if (!bundle->ca_key.empty()) j["ca_key"] = out_ + "/ca.key";
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace pstrain
