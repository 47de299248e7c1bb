// A cluster for client programs, as a user runs one: a chief started with --model external and
// PS tasks, real processes of the pstrain binary on 127.0.0.1, plus worker addresses for the
// client programs (processes the test starts with Env("worker", i), or Clients in its threads).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "testing.h"

namespace pstrain::testing {

class ExternalCluster {
 public:
  // `tag` marks every process started for this cluster, so none outlives the test.
  ExternalCluster(const std::string& tag, int num_ps, int num_workers)
      : tag_(tag), num_ps_(num_ps), ports_(FreePorts(1 + num_ps + num_workers)) {
    cluster_ = "{\"chief\": [\"" + Address(0) + "\"], \"ps\": [";
    for (int i = 0; i < num_ps; ++i) cluster_ += (i ? ", \"" : "\"") + Address(1 + i) + "\"";
    cluster_ += "], \"worker\": [";
    for (int i = 0; i < num_workers; ++i) {
      cluster_ += (i ? ", \"" : "\"") + Address(1 + num_ps + i) + "\"";
    }
    cluster_ += "]}";
  }
  ~ExternalCluster() {
    for (pid_t pid : ProcessesTagged("PSTRAIN_TEST_TAG=" + tag_)) kill(pid, SIGKILL);
  }

  // Starts the PS and then the chief with `chief_flags` (e.g. {"--mode", "sync"}).
  void Start(const std::vector<std::string>& chief_flags) {
    for (int i = 0; i < num_ps_; ++i) {
      ps_.push_back(
          testing::Start({PSTRAIN_BINARY, "server", "--connect_timeout", "60"}, Env("ps", i)));
    }
    std::vector<std::string> argv = {
        PSTRAIN_BINARY,      "server", "--job", "chief", "--model", "external",
        "--connect_timeout", "60"};
    argv.insert(argv.end(), chief_flags.begin(), chief_flags.end());
    chief_argv_ = argv;
    chief_ = testing::Start(chief_argv_, Env("chief", 0));
  }

  // Kills the chief (SIGKILL) and starts it again at its address with the same flags, as a
  // supervisor restarts a chief that died.
  void RestartChief() {
    kill(chief_.pid, SIGKILL);
    (void)Wait(chief_, 30);
    chief_ = testing::Start(chief_argv_, Env("chief", 0));
  }

  // Kills PS task `i` (SIGKILL) and starts it again at its address, as a supervisor restarts a
  // PS that died.
  void RestartPs(int i) {
    kill(ps_[i].pid, SIGKILL);
    (void)Wait(ps_[i], 30);
    ps_[i] = testing::Start({PSTRAIN_BINARY, "server", "--connect_timeout", "60"}, Env("ps", i));
  }
  // What the chief has logged so far.
  std::string ChiefLog() const { return ReadFile(chief_.err_path) + ReadFile(chief_.out_path); }

  // The environment of task `index` of job `type`: TF_CONFIG and the tag.
  std::map<std::string, std::string> Env(const std::string& type, int index) const {
    return {{"PSTRAIN_TEST_TAG", tag_},
            {"TF_CONFIG", "{\"cluster\": " + cluster_ + ", \"task\": {\"type\": \"" + type +
                              "\", \"index\": " + std::to_string(index) + "}}"}};
  }
  std::string chief() const { return Address(0); }

  // Waits for the chief and the PS to end (once every worker is done); the chief's result.
  Result Finish() {
    const Result r = Wait(chief_, 60);
    for (const Proc& p : ps_) {
      const Result pr = Wait(p, 30);
      EXPECT_EQ(pr.exit_code, 0) << pr.err;
    }
    return r;
  }
  bool AllEnded() const { return ProcessesTagged("PSTRAIN_TEST_TAG=" + tag_).empty(); }

 private:
  std::string Address(int i) const { return "127.0.0.1:" + std::to_string(ports_[i]); }

  const std::string tag_;
  const int num_ps_;
  const std::vector<int> ports_;
  std::string cluster_;
  std::vector<std::string> chief_argv_;
  Proc chief_;
  std::vector<Proc> ps_;
};

}  // namespace pstrain::testing
