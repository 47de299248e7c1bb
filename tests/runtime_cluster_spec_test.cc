// ClusterSpec: TensorFlow's TF_CONFIG format, its validation and its error messages.
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/runtime.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] = R"({
  "cluster": {"chief": ["127.0.0.1:2222"],
              "ps": ["127.0.0.1:2223", "127.0.0.1:2224"],
              "worker": ["host-a:2225", "host-b:2226", "host-c:2227"]},
  "task": {"type": "worker", "index": 2}})";

TEST(ClusterSpecTest, ParsesTfConfig) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(kGood, "TF_CONFIG");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumTasks("chief"), 1);
  EXPECT_EQ(spec->NumTasks("ps"), 2);
  EXPECT_EQ(spec->NumTasks("worker"), 3);
  EXPECT_EQ(spec->NumTasks("evaluator"), 0);
  EXPECT_EQ(*spec->Address("ps", 1), "127.0.0.1:2224");
  EXPECT_EQ(*spec->Address("worker", 2), "host-c:2227");
  EXPECT_EQ(spec->task_type, "worker");
  EXPECT_EQ(spec->task_index, 2);
}

TEST(ClusterSpecTest, TaskIsOptionalAndJsonRoundTrips) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(
      R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]}})", "f.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->task_type.has_value());
  absl::StatusOr<ClusterSpec> again = ClusterSpec::FromJson(spec->ToJson(), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->jobs, spec->jobs);
}

struct BadCase {
  const char* json;
  const char* message;
};

TEST(ClusterSpecTest, RejectsBadSpecsWithClearMessages) {
  const BadCase cases[] = {
      {"{not json", "TF_CONFIG: not valid JSON: line 1, column 3: "},
      {"{\"cluster\": {\"chief\": [\"a:1\"],\n  \"ps\": [\"b:2\"] \"worker\": []}}",
       "not valid JSON: line 2, column 24: syntax error while parsing object"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"task": {"type": "ps", "index": 0}})", "missing \"cluster\" object"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"], "gpu": ["d:4"]}})",
       "unknown job \"gpu\""},
      {R"({"cluster": {"chief": "a:1", "ps": ["b:2"], "worker": ["c:3"]}})",
       "cluster.chief must be a list"},
      {R"({"cluster": {"chief": [7], "ps": ["b:2"], "worker": ["c:3"]}})",
       "cluster.chief[0] must be a string"},
      {R"({"cluster": {"chief": ["a"], "ps": ["b:2"], "worker": ["c:3"]}})",
       "cluster.chief[0] = \"a\" is not host:port"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["b:99999"], "worker": ["c:3"]}})",
       "cluster.ps[0] = \"b:99999\" has no valid port"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["b:x"], "worker": ["c:3"]}})", "no valid port"},
      {R"({"cluster": {"ps": ["b:2"], "worker": ["c:3"]}})", "exactly one \"chief\" task, found 0"},
      {R"({"cluster": {"chief": ["a:1", "a:2"], "ps": ["b:2"], "worker": ["c:3"]}})",
       "exactly one \"chief\" task, found 2"},
      {R"({"cluster": {"chief": ["a:1"], "worker": ["c:3"]}})", "at least one \"ps\" task"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": []}})",
       "at least one \"worker\" task"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["a:1"], "worker": ["c:3"]}})",
       "address a:1 is used by more than one task"},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(c.json, "TF_CONFIG");
    ASSERT_FALSE(spec.ok()) << c.json;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(spec.status().message(), HasSubstr(c.message)) << c.json;
    EXPECT_THAT(spec.status().message(), HasSubstr("TF_CONFIG: ")) << c.json;
  }
}

// A number JSON allows but a double cannot hold makes nlohmann-json throw out_of_range, not
// parse_error: it is refused as any JSON that does not parse (it ended the process; found by
// fuzz/cluster_spec_fuzz).
TEST(ClusterSpecTest, ANumberTooLargeForADoubleIsRefused) {
  for (const char* json : {R"({"cluster": {"chief": [1E400], "ps": ["b:2"], "worker": ["c:3"]}})",
                           R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]},
                               "task": {"type": "ps", "index": -1e999}})"}) {
    absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(json, "TF_CONFIG");
    ASSERT_FALSE(spec.ok()) << json;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(spec.status().message(), HasSubstr("TF_CONFIG: not valid JSON: ")) << json;
    EXPECT_THAT(spec.status().message(), HasSubstr("number overflow")) << json;
  }
}

// A bad "task" does not make the cluster unusable: --job and --task may name the task instead.
TEST(ClusterSpecTest, BadTaskIsReportedApartFromTheCluster) {
  const BadCase cases[] = {
      {R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]}, "task": {"type": "ps"}})",
       "\"task\" must be"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]},
           "task": {"type": "ps", "index": 3}})",
       "task index 3 is out of range for job \"ps\", which has 1 task(s)"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]},
           "task": {"type": "boss", "index": 0}})",
       "unknown job \"boss\""},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(c.json, "TF_CONFIG");
    ASSERT_TRUE(spec.ok()) << c.json << ": " << spec.status();
    EXPECT_EQ(spec->NumTasks("ps"), 1);
    EXPECT_FALSE(spec->task_type.has_value()) << c.json;
    EXPECT_EQ(spec->task_status.code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(spec->task_status.message(), HasSubstr(c.message)) << c.json;
    EXPECT_THAT(spec->task_status.message(), HasSubstr("TF_CONFIG: ")) << c.json;
  }
}

TEST(ClusterSpecTest, LoadsFileOrEnvironment) {
  const std::string path = ::testing::TempDir() + "/cluster_spec_test.json";
  std::ofstream(path) << kGood;
  absl::StatusOr<ClusterSpec> from_file = ClusterSpec::Load(path);
  std::remove(path.c_str());
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->NumTasks("worker"), 3);

  EXPECT_THAT(ClusterSpec::Load("/nonexistent/cluster.json").status().message(),
              HasSubstr("cannot read cluster file /nonexistent/cluster.json"));

  setenv("TF_CONFIG", kGood, 1);
  absl::StatusOr<ClusterSpec> from_env = ClusterSpec::Load("");
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->task_index, 2);
  unsetenv("TF_CONFIG");
  EXPECT_THAT(ClusterSpec::Load("").status().message(), HasSubstr("set TF_CONFIG"));
}

TEST(ClusterSpecTest, AddressChecksJobAndIndex) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(kGood, "TF_CONFIG");
  ASSERT_TRUE(spec.ok());
  EXPECT_THAT(spec->Address("ps", 2).status().message(),
              HasSubstr("task index 2 is out of range for job \"ps\", which has 2 task(s)"));
  EXPECT_THAT(spec->Address("ps", -1).status().message(), HasSubstr("out of range"));
  EXPECT_THAT(spec->Address("gpu", 0).status().message(), HasSubstr("unknown job \"gpu\""));
}

}  // namespace
}  // namespace pstrain
