// The installed package as another project uses it: `cmake --install` of this build into a
// temporary prefix, tests/install_project built against it with find_package(pstrain) (and its
// source compiled once more with pkg-config's flags), then run as the worker of a real cluster
// whose chief and PS are the installed pstrain binary; the job's checkpoint is then read by
// another program of the project through the installed library.
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using namespace pstrain::testing;
namespace fs = std::filesystem;

// Runs a shell command line, failing the test with its output when it does not exit 0.
Result Sh(const std::string& command, const std::map<std::string, std::string>& env = {},
          double timeout_s = 600) {
  Result r = Run({"/bin/sh", "-c", command}, env, timeout_s);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.out << r.err;
  return r;
}

TEST(InstallTest, AnotherProjectBuildsAgainstTheInstalledPackageAndTrains) {
  const std::string build_dir = fs::path(PSTRAIN_BINARY).parent_path().string();
  const std::string work = TempDir();
  const std::string prefix = work + "/prefix";
  Sh("cmake --install '" + build_dir + "' --prefix '" + prefix + "'");
  for (const char* file :
       {"bin/pstrain", "lib/libpstrain_client.so", "include/pstrain/client/client.h",
        "include/pstrain/common/tensor.h", "lib/cmake/pstrain/pstrainConfig.cmake",
        "lib/cmake/pstrain/pstrainConfigVersion.cmake", "lib/pkgconfig/pstrain.pc"}) {
    EXPECT_TRUE(fs::exists(prefix + "/" + file)) << file;
  }

  const std::string project = std::string(PSTRAIN_SOURCE_DIR) + "/tests/install_project";
  const std::string project_build = work + "/project";
  ASSERT_EQ(Sh("cmake -S '" + project + "' -B '" + project_build + "' -DCMAKE_PREFIX_PATH='" +
               prefix + "' -DCMAKE_BUILD_TYPE=Release")
                .exit_code,
            0);
  ASSERT_EQ(Sh("cmake --build '" + project_build + "'").exit_code, 0);

  const std::map<std::string, std::string> pc_env = {
      {"PKG_CONFIG_PATH", prefix + "/lib/pkgconfig"}};
  const Result flags = Sh("pkg-config --cflags --libs pstrain", pc_env);
  EXPECT_THAT(flags.out, HasSubstr("include/pstrain"));
  EXPECT_THAT(flags.out, HasSubstr("-lpstrain_client"));
  EXPECT_THAT(Sh("pkg-config --modversion pstrain", pc_env).out, HasSubstr("0.2.0"));
  Sh("c++ -std=c++20 -o '" + work + "/fit_target_pc' '" + project +
         "/main.cc' $(pkg-config --cflags --libs pstrain)",
     pc_env);

  // The installed binary as chief and PS, the project's program as the only worker.
  const std::string tag = std::to_string(getpid()) + "-Install";
  const std::vector<int> ports = FreePorts(3);
  auto addr = [&](int i) { return "\"127.0.0.1:" + std::to_string(ports[i]) + "\""; };
  const std::string cluster =
      "{\"chief\": [" + addr(0) + "], \"ps\": [" + addr(1) + "], \"worker\": [" + addr(2) + "]}";
  auto env = [&](const std::string& type) {
    return std::map<std::string, std::string>{
        {"PSTRAIN_TEST_TAG", tag},
        {"TF_CONFIG",
         "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type + "\", \"index\": 0}}"}};
  };
  const std::string pstrain = prefix + "/bin/pstrain";
  const std::string ckpt = work + "/ckpt";
  const Proc chief = Start({pstrain, "server", "--job", "chief", "--model", "external",
                            "--connect_timeout", "60", "--checkpoint_dir", ckpt},
                           env("chief"));
  const Proc ps = Start({pstrain, "server", "--connect_timeout", "60"}, env("ps"));
  const Result worker = testing::Run({project_build + "/fit_target"}, env("worker"), 180);
  EXPECT_EQ(worker.exit_code, 0) << worker.out << worker.err;
  EXPECT_THAT(worker.out, HasSubstr("{\"task\": 0, \"steps\": 40, \"w_error\": "));
  const Result c = Wait(chief, 60);
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(Wait(ps, 30).exit_code, 0);

  // The job's final checkpoint, read by another program through the installed library: the
  // worker's final pull, digit for digit (%.9g prints a float exactly).
  const Result read = testing::Run({project_build + "/read_checkpoint", ckpt}, {}, 60);
  EXPECT_EQ(read.exit_code, 0) << read.err;
  const size_t w_at = worker.out.find("\"w\": [");
  ASSERT_NE(w_at, std::string::npos) << worker.out;
  const std::string w = worker.out.substr(w_at, worker.out.find(']', w_at) - w_at + 1);
  EXPECT_THAT(read.out, HasSubstr("\"global_step\": 40, \"variables\": {" + w + "}"));
  // A damaged part: the library's error names the file; nothing is printed.
  std::string part;
  for (const auto& e : fs::recursive_directory_iterator(ckpt)) {
    if (e.path().filename() == "ps-0.ckpt") part = e.path().string();
  }
  ASSERT_FALSE(part.empty());
  fs::resize_file(part, fs::file_size(part) / 2);
  const Result damaged =
      testing::Run({project_build + "/read_checkpoint", fs::path(part).parent_path()}, {}, 60);
  EXPECT_EQ(damaged.exit_code, 1) << damaged.out;
  EXPECT_THAT(damaged.err, HasSubstr(part));
  EXPECT_TRUE(damaged.out.empty()) << damaged.out;
  for (pid_t pid : ProcessesTagged("PSTRAIN_TEST_TAG=" + tag)) kill(pid, SIGKILL);
  fs::remove_all(work);
}

}  // namespace
}  // namespace pstrain
