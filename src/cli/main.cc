// The pstrain command: `pstrain server` runs one task of a cluster, `pstrain launch` a whole
// cluster on this machine.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/training_flags.h"
#include "runtime/runtime.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

std::string SelfPath(const char* argv0) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return argv0;
  return std::string(buf, n);
}

}  // namespace

int main(int argc, char** argv) {
  // Logs go to stderr: the chief's stdout carries only its result line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("pstrain"));
  CLI::App app{"pstrain: parameter-server training"};
  app.require_subcommand(1);

  pstrain::TrainingFlags training;

  pstrain::ServerOptions server;
  std::string cluster_file, log_level = "info";
  CLI::App* srv =
      app.add_subcommand("server", "run one task; the cluster comes from --cluster or TF_CONFIG");
  srv->add_option("--cluster", cluster_file, "cluster spec file (TF_CONFIG's JSON format)");
  srv->add_option("--job", server.job, "chief, ps or worker (default: TF_CONFIG's task.type)");
  srv->add_option("--task", server.task, "task index (default: TF_CONFIG's task.index)");
  srv->add_option("--connect_timeout", server.connect_timeout_s,
                  "seconds to wait for peers before giving up")
      ->capture_default_str();
  srv->add_option("--log_level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  training.AddTo(srv);

  pstrain::LaunchOptions launch;
  CLI::App* lch = app.add_subcommand("launch", "run a whole cluster on 127.0.0.1");
  lch->add_option("--ps", launch.num_ps, "number of parameter servers")->capture_default_str();
  lch->add_option("--workers", launch.num_workers, "number of workers")->capture_default_str();
  lch->add_option("--log_level", launch.log_level, "log level of ps and worker tasks")
      ->capture_default_str();
  lch->allow_extras();  // training flags, passed on to the chief

  CLI11_PARSE(app, argc, argv);

  if (*lch) {
    launch.binary = SelfPath(argv[0]);
    launch.chief_flags = lch->remaining();
    // Check the training flags here so that a typo fails before any process starts.
    CLI::App check;
    pstrain::TrainingFlags flags;
    flags.AddTo(&check);
    try {
      std::vector<std::string> args(launch.chief_flags.rbegin(), launch.chief_flags.rend());
      check.parse(args);
    } catch (const CLI::ParseError& e) {
      std::fprintf(stderr, "pstrain launch: error: %s\n", e.what());
      return 2;
    }
    if (absl::StatusOr<pstrain::JobConfig> c = flags.ToConfig(); !c.ok()) {
      std::fprintf(stderr, "pstrain launch: error: %s\n",
                   std::string(c.status().message()).c_str());
      return 2;
    }
    return pstrain::Launch(launch);
  }

  spdlog::set_level(spdlog::level::from_str(log_level));
  absl::StatusOr<pstrain::ClusterSpec> cluster = pstrain::ClusterSpec::Load(cluster_file);
  if (!cluster.ok()) {
    std::fprintf(stderr, "pstrain server: error: %s\n",
                 std::string(cluster.status().message()).c_str());
    return 2;
  }
  server.cluster = *cluster;
  if (server.job.empty()) {
    if (!cluster->task_type) {
      std::fprintf(
          stderr,
          "pstrain server: error: no task: pass --job and --task or set TF_CONFIG's \"task\"\n");
      return 2;
    }
    server.job = *cluster->task_type;
    if (srv->count("--task") == 0) server.task = cluster->task_index.value_or(0);
  }
  absl::StatusOr<pstrain::JobConfig> config = training.ToConfig();
  if (!config.ok()) {
    std::fprintf(stderr, "pstrain server: error: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  server.job_config = *config;
  return pstrain::RunServer(server);
}
