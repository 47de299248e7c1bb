// The pstrain command: `pstrain server` runs one task of a cluster, `pstrain launch` a whole
// cluster on this machine.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "runtime/runtime.h"
#include "spdlog/spdlog.h"

namespace {

// Training flags: given to the chief, which passes them on to the workers.
void AddTrainingFlags(CLI::App* app, pstrain::JobConfig* c, std::string* optimizer, double* lr) {
  app->add_option("--data", c->data_dir, "directory with the MNIST-layout IDX files")
      ->capture_default_str();
  app->add_option("--hidden", c->hidden, "hidden layer widths, comma separated")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--optimizer", *optimizer, "sgd or adam")->capture_default_str();
  app->add_option("--lr", *lr, "learning rate")->capture_default_str();
  app->add_option("--batch", c->batch_size, "examples per step and worker")->capture_default_str();
  app->add_option("--epochs", c->epochs, "passes over the training data")->capture_default_str();
  app->add_option("--mode", c->mode, "consistency: async")->capture_default_str();
  app->add_option("--seed", c->seed, "seed for initialisation and shuffling")
      ->capture_default_str();
}

std::string SelfPath(const char* argv0) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return argv0;
  return std::string(buf, n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pstrain: parameter-server training"};
  app.require_subcommand(1);

  pstrain::JobConfig config;
  std::string optimizer = config.optimizer.name();
  double lr = config.optimizer.learning_rate();

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
  AddTrainingFlags(srv, &config, &optimizer, &lr);

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
    pstrain::JobConfig c;
    std::string o = optimizer;
    double l = lr;
    AddTrainingFlags(&check, &c, &o, &l);
    try {
      std::vector<std::string> args(launch.chief_flags.rbegin(), launch.chief_flags.rend());
      check.parse(args);
    } catch (const CLI::ParseError& e) {
      std::fprintf(stderr, "pstrain launch: error: %s\n", e.what());
      return 2;
    }
    c.optimizer.set_name(o);
    c.optimizer.set_learning_rate(l);
    if (absl::Status s = c.Validate(); !s.ok()) {
      std::fprintf(stderr, "pstrain launch: error: %s\n", std::string(s.message()).c_str());
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
  config.optimizer.set_name(optimizer);
  config.optimizer.set_learning_rate(lr);
  server.job_config = config;
  return pstrain::RunServer(server);
}
