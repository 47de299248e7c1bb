// The launcher's secrets (runtime/launch_secrets.h), the certificates they are made of
// (runtime/certs.h) and the environment the launcher hands its tasks (EnvironmentWith).
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/certs.h"
#include "runtime/launch_process.h"
#include "runtime/launch_secrets.h"

namespace pstrain {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempDir() {
  std::string pattern = std::filesystem::temp_directory_path().string() + "/secrets-test-XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

TEST(Certs, TokensAreRandomHex) {
  const std::string a = *RandomToken(), b = *RandomToken();
  EXPECT_TRUE(std::regex_match(a, std::regex("[0-9a-f]{64}"))) << a;
  EXPECT_NE(a, b);
}

TEST(Certs, ACertificateNamesEveryHostAndIsSignedByItsCa) {
  CertOptions o;
  o.hosts = {"10.0.0.7", "node-1.example.com"};
  o.days = 3;
  const CertBundle b = *MakeCertificates(o);
  BIO* cb = BIO_new_mem_buf(b.cert.data(), static_cast<int>(b.cert.size()));
  BIO* ab = BIO_new_mem_buf(b.ca_cert.data(), static_cast<int>(b.ca_cert.size()));
  X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  X509* ca = PEM_read_bio_X509(ab, nullptr, nullptr, nullptr);
  ASSERT_NE(cert, nullptr);
  ASSERT_NE(ca, nullptr);
  EXPECT_EQ(X509_check_host(cert, "node-1.example.com", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_host(cert, "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(cert, "10.0.0.7", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert, "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert, "10.0.0.8", 0), 0);
  EXPECT_EQ(X509_check_host(cert, "other.example.com", 0, 0, nullptr), 0);
  EXPECT_EQ(X509_verify(cert, X509_get0_pubkey(ca)), 1);
  EXPECT_EQ(X509_check_ca(ca), 1);
  EXPECT_EQ(X509_check_ca(cert), 0);
  // Valid now, for the days asked.
  EXPECT_LT(X509_cmp_current_time(X509_get0_notBefore(cert)), 0);
  EXPECT_GT(X509_cmp_current_time(X509_get0_notAfter(cert)), 0);
  X509_free(cert);
  X509_free(ca);
  BIO_free(cb);
  BIO_free(ab);
}

TEST(Certs, BadInputIsNamed) {
  CertOptions o;
  o.hosts = {"under_score.example.com"};
  EXPECT_THAT(MakeCertificates(o).status().message(), HasSubstr("under_score.example.com"));
  o.hosts = {};
  o.days = 0;
  EXPECT_THAT(MakeCertificates(o).status().message(), HasSubstr("0 days"));
  o.days = 1;
  o.ca_cert = "not a pem";
  EXPECT_THAT(MakeCertificates(o).status().message(), HasSubstr("go together"));
  o.ca_key = "not a pem";
  EXPECT_THAT(MakeCertificates(o).status().message(), HasSubstr("not a PEM certificate"));
}

TEST(LaunchSecrets, InALogDirectoryTheFilesArePrivate) {
  const std::string dir = TempDir();
  {
    LaunchSecrets s = *LaunchSecrets::Make(dir, "", true);
    EXPECT_EQ(Read(dir + "/auth_token"), s.token() + "\n");
    EXPECT_THAT(s.TaskFlags(), ElementsAre("--auth_token_file", dir + "/auth_token", "--tls_cert",
                                           dir + "/tls/cert.pem", "--tls_key", dir + "/tls/key.pem",
                                           "--tls_ca", dir + "/tls/ca.pem"));
    for (const char* f : {"/auth_token", "/tls/key.pem", "/tls"}) {
      struct stat st;
      ASSERT_EQ(stat((dir + f).c_str(), &st), 0) << f;
      EXPECT_EQ(st.st_mode & 077, 0u) << f;
    }
    EXPECT_FALSE(std::filesystem::exists(dir + "/tls/ca.key"));
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/auth_token"));  // left with the logs
  std::filesystem::remove_all(dir);
}

TEST(LaunchSecrets, WithoutADirectoryNothingIsWritten) {
  std::string token, path;
  {
    LaunchSecrets s = *LaunchSecrets::Make("", "", true);
    token = s.token();
    path = s.token_file();
    EXPECT_THAT(path, ::testing::StartsWith("/dev/fd/"));
    EXPECT_EQ(Read(path), token + "\n");
    EXPECT_THAT(Read(s.TaskFlags()[3]), HasSubstr("BEGIN CERTIFICATE"));
  }
  EXPECT_NE(Read(path), token + "\n");  // closed with the object
}

TEST(LaunchSecrets, AGivenTokenFileIsUsedAsItIs) {
  const std::string dir = TempDir();
  std::ofstream(dir + "/t") << "  my-token\n";
  LaunchSecrets s = *LaunchSecrets::Make("", dir + "/t", false);
  EXPECT_EQ(s.token(), "my-token");
  EXPECT_THAT(s.TaskFlags(), ElementsAre("--auth_token_file", dir + "/t"));
  std::ofstream(dir + "/empty") << "\n";
  EXPECT_THAT(LaunchSecrets::Make("", dir + "/empty", false).status().message(),
              HasSubstr("holds no token"));
  std::filesystem::remove_all(dir);
}

TEST(LaunchSecrets, TheEnvironmentReplacesInheritedCredentials) {
  setenv("PSTRAIN_AUTH_TOKEN_FILE", "/elsewhere/token", 1);
  setenv("PSTRAIN_TLS_CERT", "/elsewhere/cert.pem", 1);
  LaunchSecrets s = *LaunchSecrets::Make("", "", false);
  const std::vector<std::string> env = EnvironmentWith("{}", {}, s.Environment());
  EXPECT_THAT(env, Contains("PSTRAIN_AUTH_TOKEN=" + s.token()));
  EXPECT_THAT(env, Contains("TF_CONFIG={}"));
  for (const std::string& e : env) {
    EXPECT_THAT(e, Not(HasSubstr("/elsewhere/")));
  }
  unsetenv("PSTRAIN_AUTH_TOKEN_FILE");
  unsetenv("PSTRAIN_TLS_CERT");
}

}  // namespace
}  // namespace pstrain
