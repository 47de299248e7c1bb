// Internal to src/runtime: what each task of `pstrain launch` runs, and where it listens.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/launch_logs.h"
#include "runtime/launch_secrets.h"
#include "runtime/runtime.h"

namespace pstrain {

class LaunchPlan {
 public:
  explicit LaunchPlan(const LaunchOptions& o) : o_(o), chief_flags_(o.chief_flags) {}
  ~LaunchPlan();  // removes a temporary checkpoint directory
  LaunchPlan(const LaunchPlan&) = delete;
  LaunchPlan& operator=(const LaunchPlan&) = delete;

  // Picks every task's address (and metrics port) and, when the chief may be restarted, its
  // checkpoint directory. `secrets` (and `logs`, null if none) must outlive the plan.
  absl::Status Prepare(const LaunchSecrets* secrets, const TaskLogs* logs);

  // The command line of `pstrain server` as task `job`:`task`: the chief's training flags (those
  // of a restart if `restarted`, see RestartedChief; `*from` then says where it starts from) or
  // the log level, and the flags of security, metrics and log format. The first time, prints
  // where its metrics are.
  std::vector<std::string> ServerArgv(const std::string& job, int task, bool restarted,
                                      std::string* from = nullptr);
  // The environment of task `job`:`task`: TF_CONFIG naming it, `defaults` and the secrets.
  std::vector<std::string> Environment(const std::string& job, int task,
                                       const std::vector<std::string>& defaults) const;
  // The chief's checkpoint directory, "" if it has none.
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }
  // Whether the checkpoint directory holds a checkpoint this job saved: a ckpt-<step> whose
  // manifest was not there, as it is now, when the launch started.
  bool SavedByThisJob() const;

 private:
  absl::Status PickAddresses();
  absl::Status PrepareCheckpoints(const TaskLogs* logs);

  const LaunchOptions& o_;
  const LaunchSecrets* secrets_ = nullptr;
  ClusterSpec spec_;                      // the addresses of every task
  std::vector<int> metrics_ports_;        // of each task, in start order; empty without --metrics
  std::vector<bool> announced_;           // whose metrics address was printed
  std::vector<std::string> chief_flags_;  // o_.chief_flags and the checkpoints launch adds
  std::string checkpoint_dir_;
  std::string temp_checkpoints_;    // a checkpoint directory to remove at the end
  std::set<std::string> at_start_;  // the checkpoints in checkpoint_dir_ at the start
};

}  // namespace pstrain
