#include "runtime/launch_plan.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/launch_process.h"
#include "runtime/launch_supervisor.h"

namespace pstrain {
namespace {

// The checkpoint interval launch gives a chief it may restart, unless one was given.
constexpr const char* kCheckpointEverySecs = "10";

// The checkpoints in `dir`, each as its name and the identity of its manifest (inode and time
// written): a checkpoint saved again, or its manifest rewritten, is another.
std::set<std::string> CheckpointsIn(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    struct stat st;
    if (name.rfind("ckpt-", 0) != 0 || ::stat((e.path() / "manifest.json").c_str(), &st) != 0) {
      continue;
    }
    out.insert(absl::StrCat(name, " ", st.st_ino, " ", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec));
  }
  return out;
}

}  // namespace

LaunchPlan::~LaunchPlan() {
  std::error_code ignored;
  if (!temp_checkpoints_.empty()) std::filesystem::remove_all(temp_checkpoints_, ignored);
}

absl::Status LaunchPlan::Prepare(const LaunchSecrets* secrets, const TaskLogs* logs) {
  secrets_ = secrets;
  checkpoint_dir_ = o_.checkpoint_dir;
  if (absl::Status s = PickAddresses(); !s.ok()) return s;
  return PrepareCheckpoints(logs);
}

absl::Status LaunchPlan::PickAddresses() {
  const int tasks = 1 + o_.num_ps + o_.num_workers;
  absl::StatusOr<std::vector<int>> ports = FreePorts(o_.metrics ? 2 * tasks : tasks);
  if (!ports.ok()) return ports.status();
  size_t next = 0;
  auto address = [&] { return absl::StrCat("127.0.0.1:", (*ports)[next++]); };
  spec_.jobs["chief"].push_back(address());
  for (int i = 0; i < o_.num_ps; ++i) spec_.jobs["ps"].push_back(address());
  for (int i = 0; i < o_.num_workers; ++i) spec_.jobs["worker"].push_back(address());
  if (o_.metrics) metrics_ports_.assign(ports->begin() + tasks, ports->end());
  announced_.assign(tasks, false);
  return absl::OkStatus();
}

// A chief that may be restarted needs checkpoints to resume from: without --checkpoint_dir it
// saves them in the log directory's "checkpoints" (or a temporary directory removed at the end),
// every kCheckpointEverySecs unless an interval was given.
absl::Status LaunchPlan::PrepareCheckpoints(const TaskLogs* logs) {
  if (!o_.restart_failed || !o_.recovery) return absl::OkStatus();
  if (!checkpoint_dir_.empty()) {
    at_start_ = CheckpointsIn(checkpoint_dir_);  // another job's, or the one --resume continues
    return absl::OkStatus();
  }
  if (logs != nullptr) {
    checkpoint_dir_ = logs->dir() + "/checkpoints";
  } else {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/pstrain-checkpoints-XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot create a checkpoint directory ", dir, ": ", strerror(errno)));
    }
    checkpoint_dir_ = temp_checkpoints_ = dir;
  }
  at_start_ = CheckpointsIn(checkpoint_dir_);  // a log directory's may hold an earlier job's
  chief_flags_.insert(chief_flags_.end(), {"--checkpoint_dir", checkpoint_dir_});
  if (!o_.checkpoint_interval_given) {
    chief_flags_.insert(chief_flags_.end(), {"--checkpoint_every_secs", kCheckpointEverySecs});
  }
  std::fprintf(stderr, "pstrain launch: checkpoints (to restart failed tasks from): %s\n",
               checkpoint_dir_.c_str());
  return absl::OkStatus();
}

bool LaunchPlan::SavedByThisJob() const {
  if (checkpoint_dir_.empty()) return false;
  for (const std::string& c : CheckpointsIn(checkpoint_dir_)) {
    if (!at_start_.contains(c)) return true;
  }
  return false;
}

std::vector<std::string> LaunchPlan::ServerArgv(const std::string& job, int task, bool restarted,
                                                std::string* from) {
  std::vector<std::string> argv = {o_.binary, "server", "--job",
                                   job,       "--task", std::to_string(task)};
  if (job == "chief") {
    ChiefRestart restart;
    if (restarted) {
      restart = RestartedChief(chief_flags_, checkpoint_dir_, SavedByThisJob());
      if (from != nullptr) *from = restart.from;
    }
    const std::vector<std::string>& flags = restarted ? restart.flags : chief_flags_;
    argv.insert(argv.end(), flags.begin(), flags.end());
  } else {
    argv.insert(argv.end(), {"--log_level", o_.log_level});
  }
  const std::vector<std::string> security = secrets_->TaskFlags();
  argv.insert(argv.end(), security.begin(), security.end());
  argv.insert(argv.end(), {"--log_format", o_.log_format});
  argv.insert(argv.end(), {"--transport", o_.transport});
  if (metrics_ports_.empty()) return argv;
  const size_t position = job == "chief" ? 0 : job == "ps" ? 1 + task : 1 + o_.num_ps + task;
  const std::string port = std::to_string(metrics_ports_[position]);
  argv.insert(argv.end(), {"--metrics_port", port, "--metrics_linger", "0"});
  if (announced_[position]) return argv;
  announced_[position] = true;
  std::fprintf(stderr, "pstrain launch: %s:%d metrics: http://127.0.0.1:%s/metrics\n", job.c_str(),
               task, port.c_str());
  if (job == "chief") {
    std::fprintf(stderr, "pstrain launch: status page: http://127.0.0.1:%s/?token=%s\n",
                 port.c_str(), secrets_->token().c_str());
  }
  return argv;
}

std::vector<std::string> LaunchPlan::Environment(const std::string& job, int task,
                                                 const std::vector<std::string>& defaults) const {
  ClusterSpec spec = spec_;
  spec.task_type = job;
  spec.task_index = task;
  // A worker COMMAND's Client takes the launch's data plane from PSTRAIN_TRANSPORT.
  std::vector<std::string> overrides = secrets_->Environment();
  overrides.push_back("PSTRAIN_TRANSPORT=" + o_.transport);
  return EnvironmentWith(spec.ToJson(), defaults, overrides);
}

}  // namespace pstrain
