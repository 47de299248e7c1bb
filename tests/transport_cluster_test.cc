// `--transport` on a whole local cluster of real processes (`pstrain launch`): with ucx or tcp
// the PS serves that carrier beside gRPC and the job trains as on gRPC; TLS refuses ucx and tcp
// (neither is encrypted) and keeps auto on gRPC, by the rule of docs/transport_ucx.md.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace pstrain::testing;

class TransportClusterTest : public ProcessTest {
 protected:
  Result Launch(const std::vector<std::string>& flags, const std::string& tasks = "1") {
    std::vector<std::string> argv = {
        PSTRAIN_BINARY, "launch",   "--ps",      tasks,      "--workers",   tasks,    "--hidden",
        "16",           "--batch",  "128",       "--epochs", "1",           "--mode", "async",
        "--data",       MnistDir(), "--log_dir", dir_,       "--log_level", "info"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunTagged(argv, {}, 240);
  }
  std::string Log(const std::string& task) {
    std::ifstream in(dir_ + "/" + task + ".log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

TEST_F(TransportClusterTest, UcxServesTheDataPlaneAndTheJobTrains) {
  const Result r = Launch({"--transport", "ucx"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json result = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  EXPECT_EQ(result["examples"], 60000);
  EXPECT_GT(result["test_accuracy"].get<double>(), 0.8);  // chance is 0.1
  EXPECT_THAT(Log("ps-0"), HasSubstr("ps:0 serving UCX to the workers of its host"));
}

// Two PS, so that each worker's data plane reaches two ports of its own beside gRPC.
TEST_F(TransportClusterTest, TcpServesTheDataPlaneAndTheJobTrains) {
  const Result r = Launch({"--transport", "tcp"}, /*tasks=*/"2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json result = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  EXPECT_EQ(result["examples"], 60000);
  EXPECT_GT(result["test_accuracy"].get<double>(), 0.8);
  for (const char* ps : {"ps-0", "ps-1"}) {
    const std::string log = Log(ps);
    // On the PS's own loopback address, as its gRPC server: not on every interface.
    EXPECT_THAT(log, HasSubstr("serving the TCP data plane on 127.0.0.1:"));
    // Every pull and push of both workers went over it: none is left to gRPC.
    EXPECT_THAT(log, ::testing::ContainsRegex("served [1-9][0-9]* pulls and pushes over "
                                              "[1-9][0-9]* connections"))
        << log;
  }
}

TEST_F(TransportClusterTest, TlsRefusesUcxAndKeepsAutoOnGrpc) {
  const Result refused = Launch({"--transport", "ucx", "--tls"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("--transport ucx cannot be used with TLS"));

  const Result tcp = Launch({"--transport", "tcp", "--tls"});
  EXPECT_NE(tcp.exit_code, 0);
  EXPECT_THAT(tcp.err, HasSubstr("--transport tcp cannot be used with TLS"));

  const Result kept = Launch({"--transport", "auto", "--tls"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_THAT(Log("ps-0"), HasSubstr("the data plane stays on gRPC"));
  EXPECT_THAT(Log("ps-0"), Not(HasSubstr("serving UCX")));
}

}  // namespace
}  // namespace pstrain
