// The pstrain command: `pstrain server` runs one task of a cluster, `pstrain launch` a whole
// cluster on this machine.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/command/bench.h"
#include "cli/checkpoint_command.h"
#include "cli/gen_certs.h"
#include "cli/gen_criteo.h"
#include "cli/infer_schema.h"
#include "runtime/runtime.h"
#include "runtime/training_flags.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#ifndef PSTRAIN_VERSION
#define PSTRAIN_VERSION "unknown"  // the build defines it from the CMake project's version
#endif

namespace {

std::string SelfPath(const char* argv0) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return argv0;
  return std::string(buf, n);
}

void Print(const std::string& command, const char* kind, const std::string& message) {
  std::fprintf(stderr, "%s: %s: %s\n", command.c_str(), kind, message.c_str());
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "; did you mean X?" for the known name closest to `word`, or "" if none is close.
std::string DidYouMean(const std::string& word, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& k : known) {
    const size_t d = EditDistance(word, k);
    if (d < best_distance) {
      best = &k;
      best_distance = d;
    }
  }
  return best == nullptr ? "" : absl::StrCat("; did you mean ", *best, "?");
}

std::vector<std::string> FlagNames(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app->get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  }
  return names;
}

// The first "--flag" in `args` that `app` does not define, with a suggestion, or "".
std::string UnknownFlag(const CLI::App* app, const std::vector<std::string>& args) {
  const std::vector<std::string> known = FlagNames(app);
  for (const std::string& a : args) {
    if (a.rfind("--", 0) != 0 || a == "--") continue;
    const std::string name = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::StrCat("unknown flag ", name, DidYouMean(name, known));
    }
  }
  return "";
}

// The "--flag"s of `app` that take no value (--tls).
std::vector<std::string> SwitchNames(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app->get_options()) {
    if (o->get_expected_max() != 0) continue;
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  }
  return names;
}

// `args` without the flags named in `drop` (and their values, unless they are `switches`):
// what the launcher passes on.
std::vector<std::string> Without(const std::vector<std::string>& args,
                                 const std::vector<std::string>& drop,
                                 const std::vector<std::string>& switches) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string name = args[i].substr(0, args[i].find('='));
    if (std::find(drop.begin(), drop.end(), name) == drop.end()) {
      kept.push_back(args[i]);
    } else if (name == args[i] &&
               std::find(switches.begin(), switches.end(), name) == switches.end()) {
      ++i;  // "--flag value": skip the value too
    }
  }
  return kept;
}

const std::vector<std::string> kLogLevels = {"trace", "debug",    "info", "warn",
                                             "error", "critical", "off"};

// The fallback rule of docs/transport_ucx.md.
constexpr char kTransportHelp[] =
    "data plane of pulls and pushes: grpc; tcp (TCP connections of their own beside gRPC, on a "
    "free port per PS; refused with TLS, which does not cover it); ucx (UCX over shared memory, "
    "workers on the PS's host only; an error naming UCX's reason if it cannot start or reach a "
    "PS; refused with TLS); auto (ucx where it works, else grpc with one warning; grpc with TLS)";

}  // namespace

int main(int argc, char** argv) {
  // Logs go to stderr: the chief's stdout carries only its result line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("pstrain"));
  CLI::App app{"pstrain: parameter-server training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("pstrain ") + PSTRAIN_VERSION);

  pstrain::ServerOptions server;
  pstrain::TrainingFlags server_training;
  std::string cluster_file, log_level = "info";
  CLI::App* srv =
      app.add_subcommand("server", "run one task; the cluster comes from --cluster or TF_CONFIG");
  srv->add_option("--cluster", cluster_file, "cluster spec file (TF_CONFIG's JSON format)");
  srv->add_option("--job", server.job,
                  "chief, ps or worker (default: TF_CONFIG's task.type; given, it overrides "
                  "TF_CONFIG's task)");
  srv->add_option("--task", server.task, "task index (default: TF_CONFIG's task.index)");
  srv->add_option("--connect_timeout", server.connect_timeout_s,
                  "seconds to wait for peers before giving up")
      ->capture_default_str();
  srv->add_option("--log_level", log_level, absl::StrJoin(kLogLevels, ", "))
      ->check(CLI::IsMember(kLogLevels))
      ->capture_default_str();
  srv->add_option("--tls_cert", server.security.tls_cert,
                  "PEM certificate: TLS on every channel and server (env PSTRAIN_TLS_CERT)");
  srv->add_option("--tls_key", server.security.tls_key,
                  "PEM private key of --tls_cert (env PSTRAIN_TLS_KEY)");
  srv->add_option("--tls_ca", server.security.tls_ca,
                  "PEM CA that signs every task's certificate: mutual TLS (env PSTRAIN_TLS_CA)");
  srv->add_option("--auth_token_file", server.security.auth_token_file,
                  "file with the job token every request carries and every server checks (env "
                  "PSTRAIN_AUTH_TOKEN_FILE, or the token itself in PSTRAIN_AUTH_TOKEN)");
  srv->add_option("--metrics_port", server.metrics_port,
                  "HTTP port for /metrics, /healthz and (chief) the status page; 0 = off")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  srv->add_option("--metrics_linger", server.metrics_linger_s,
                  "seconds the HTTP listener stays up after the job ended")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  srv->add_option("--log_format", server.log_format, "text or json (one JSON object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  srv->add_option("--transport", server.transport, kTransportHelp)
      ->check(CLI::IsMember({"grpc", "tcp", "ucx", "auto"}))
      ->capture_default_str();
  server_training.AddTo(srv);

  pstrain::LaunchOptions launch;
  pstrain::TrainingFlags launch_training;
  CLI::App* lch = app.add_subcommand(
      "launch",
      "run a whole cluster on 127.0.0.1; training flags go to its chief; `launch [flags] -- "
      "COMMAND ARGS...` runs COMMAND as every worker");
  lch->footer(
      "After --, COMMAND ARGS... is what every worker runs instead of `pstrain server`, with "
      "TF_CONFIG naming its task and its output in its log file; the chief then serves client "
      "programs (--model external).");
  lch->add_option("--ps", launch.num_ps, "number of parameter servers")->capture_default_str();
  lch->add_option("--workers", launch.num_workers, "number of workers")->capture_default_str();
  lch->add_option("--log_level", launch.log_level, "log level of ps and worker tasks")
      ->check(CLI::IsMember(kLogLevels))
      ->capture_default_str();
  lch->add_option("--log_dir", launch.log_dir,
                  "a log file per task here, <job>-<index>.log (default with -- COMMAND: a new "
                  "directory under $TMPDIR)");
  lch->add_flag(
      "--tls", launch.tls,
      "TLS between the tasks, with a throw-away CA and certificates in the log directory");
  lch->add_option("--auth_token_file", launch.auth_token_file,
                  "the job token (default: a new random token per launch)");
  lch->add_flag("--metrics", launch.metrics,
                "an HTTP listener (/metrics, the chief's status page) on a free port per task");
  lch->add_option("--log_format", launch.log_format, "text or json, for every task")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  lch->add_option("--transport", launch.transport, std::string(kTransportHelp) + "; for every task")
      ->check(CLI::IsMember({"grpc", "tcp", "ucx", "auto"}))
      ->capture_default_str();
  lch->add_flag("--restart_failed", launch.restart_failed,
                "restart a task that dies while the job runs (--restart_failed=false: the job "
                "ends)")
      ->capture_default_str();
  lch->add_option("--max_restarts", launch.max_restarts,
                  "restarts per task, after which a task that dies ends the job")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  const std::vector<std::string> launch_only = FlagNames(lch), launch_switches = SwitchNames(lch);
  launch_training.AddTo(lch);

  pstrain::GenCriteoCommand gen_criteo(&app);
  pstrain::InferSchemaCommand infer_schema(&app);
  pstrain::GenCertsCommand gen_certs(&app);
  pstrain::CheckpointCommand checkpoint(&app);
  pstrain::BenchCommand bench(&app);

  std::vector<std::string> args(argv + 1, argv + argc);
  // `pstrain launch [flags] -- COMMAND ARGS...`: what follows "--" is the workers' command, and
  // their chief serves client programs unless --model says otherwise (refused below).
  std::optional<std::vector<std::string>> worker_command;
  if (!args.empty() && args[0] == "launch") {
    if (auto dash = std::find(args.begin() + 1, args.end(), "--"); dash != args.end()) {
      worker_command.emplace(dash + 1, args.end());
      args.erase(dash, args.end());
      const bool model_given = std::any_of(args.begin(), args.end(), [](const std::string& a) {
        return a == "--model" || a.rfind("--model=", 0) == 0;
      });
      if (!model_given) args.push_back("--model=external");
    }
  }
  std::vector<char*> parse_argv = {argv[0]};
  for (std::string& a : args) parse_argv.push_back(a.data());
  const std::vector<std::string> commands = {
      "server", "launch", "gen-criteo", "gen-certs", "infer-schema", "checkpoint", "bench"};
  if (!args.empty() && args[0][0] != '-' &&
      std::find(commands.begin(), commands.end(), args[0]) == commands.end()) {
    Print(
        "pstrain", "error",
        absl::StrCat("unknown command ", args[0], DidYouMean(args[0], commands),
                     " (commands: server, launch, gen-criteo, gen-certs, infer-schema, checkpoint, "
                     "bench)"));
    return 2;
  }
  try {
    app.parse(static_cast<int>(parse_argv.size()), parse_argv.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const CLI::App* sub = *lch                    ? lch
                          : *srv                  ? srv
                          : gen_criteo.chosen()   ? gen_criteo.app()
                          : gen_certs.chosen()    ? gen_certs.app()
                          : infer_schema.chosen() ? infer_schema.app()
                          : checkpoint.chosen()   ? checkpoint.app()
                          : bench.chosen()        ? bench.app()
                                                  : &app;
    // "pstrain checkpoint inspect": the names of the subcommands, which the flags follow.
    std::string command = "pstrain";
    size_t depth = 0;
    for (const CLI::App* a = sub; a != &app; a = a->get_parent(), ++depth) {
      command.insert(7, " " + a->get_name());
    }
    std::string unknown = UnknownFlag(
        sub,
        std::vector<std::string>(
            args.begin() + static_cast<std::ptrdiff_t>(std::min(depth, args.size())), args.end()));
    Print(command, "error", unknown.empty() ? std::string(e.what()) : unknown);
    return 2;
  }

  if (gen_criteo.chosen()) return gen_criteo.Run();
  if (gen_certs.chosen()) return gen_certs.Run();
  if (infer_schema.chosen()) return infer_schema.Run();
  if (checkpoint.chosen()) return checkpoint.Run();
  if (bench.chosen()) return bench.Run(SelfPath(argv[0]));

  if (*lch) {
    const std::string command = "pstrain launch";
    launch.binary = SelfPath(argv[0]);
    launch.chief_flags = Without(std::vector<std::string>(args.begin() + 1, args.end()),
                                 launch_only, launch_switches);
    absl::StatusOr<pstrain::JobConfig> config = launch_training.ToConfig();
    absl::Status s = config.status();
    if (s.ok() && worker_command && worker_command->empty()) {
      s = absl::InvalidArgumentError(
          "nothing after --: give the command every worker runs, e.g. -- python3 train.py");
    } else if (s.ok() && worker_command && config->model != "external") {
      s = absl::InvalidArgumentError(
          absl::StrCat("--model ", config->model,
                       " does not go with -- COMMAND: the command "
                       "trains the model as every worker, and the chief serves it with --model "
                       "external (the default there)"));
    }
    if (s.ok()) s = config->ValidateFor(launch.num_ps, launch.num_workers);
    if (s.ok()) {
      // Client programs (--model external) have a task queue, so recovery, with --rows.
      launch.recovery = config->task_rows != 0 && (config->BuiltInModel() || config->rows > 0);
      launch.checkpoint_dir = config->checkpoint_dir;
      launch.checkpoint_interval_given =
          config->checkpoint_every_steps > 0 || config->checkpoint_every_secs > 0;
    }
    if (worker_command) launch.worker_command = *worker_command;
    for (const std::string& w : launch_training.Inapplicable()) Print(command, "warning", w);
    if (!s.ok()) {
      Print(command, "error", std::string(s.message()));
      return 2;
    }
    return pstrain::Launch(launch);
  }

  const std::string command = "pstrain server";
  spdlog::set_level(spdlog::level::from_str(log_level));
  absl::StatusOr<pstrain::ClusterSpec> cluster = pstrain::ClusterSpec::Load(cluster_file);
  if (!cluster.ok()) {
    Print(command, "error", std::string(cluster.status().message()));
    return 2;
  }
  server.cluster = *cluster;
  if (srv->count("--job") == 0) {
    // The task comes from TF_CONFIG's "task" (or the cluster file's), unless --job names it.
    if (!cluster->task_status.ok()) {
      Print(command, "error", std::string(cluster->task_status.message()));
      return 2;
    }
    if (!cluster->task_type) {
      Print(command, "error", "no task: pass --job and --task or set TF_CONFIG's \"task\"");
      return 2;
    }
    server.job = *cluster->task_type;
    if (srv->count("--task") == 0) server.task = cluster->task_index.value_or(0);
  }
  absl::StatusOr<pstrain::JobConfig> config = server_training.ToConfig();
  if (!config.ok()) {
    Print(command, "error", std::string(config.status().message()));
    return 2;
  }
  if (server.job == "chief") {
    for (const std::string& w : server_training.Inapplicable()) Print(command, "warning", w);
  } else if (const std::vector<std::string> given = server_training.Given(); !given.empty()) {
    Print(command, "warning",
          absl::StrCat(absl::StrJoin(given, ", "), given.size() > 1 ? " are" : " is",
                       " read by the chief only; ", server.job, ":", server.task, " ignores ",
                       given.size() > 1 ? "them" : "it"));
  }
  server.job_config = *config;
  return pstrain::RunServer(server);
}
