// The cluster, the process that plays one role in it, and the local launcher. Public header of
// src/runtime: what the pstrain command calls.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/security.h"
#include "master/master.h"

namespace pstrain {

// Jobs of a cluster, each a list of host:port, in TensorFlow's TF_CONFIG format:
//   {"cluster": {"chief": ["h:p"], "ps": [...], "worker": [...]},
//    "task": {"type": "ps", "index": 0}}
// "task" is optional. Known jobs: chief (exactly one task), ps and worker (at least one each),
// evaluator (optional; reserved).
struct ClusterSpec {
  std::map<std::string, std::vector<std::string>> jobs;
  std::optional<std::string> task_type;  // from "task", if present and valid
  std::optional<int> task_index;
  // Why "task" cannot be used, if it is present but bad. Not an error of the spec: a command
  // line that names the task (--job, --task) does not need it.
  absl::Status task_status;

  // Parses and validates the cluster; errors say what is wrong and where ("TF_CONFIG: ...",
  // "<file>: ...", with line and column for JSON that does not parse).
  static absl::StatusOr<ClusterSpec> FromJson(const std::string& text, const std::string& source);
  // Reads `file` if non-empty, else the TF_CONFIG environment variable; error if neither is set.
  static absl::StatusOr<ClusterSpec> Load(const std::string& file);

  int NumTasks(const std::string& job) const;
  const std::vector<std::string>& Tasks(const std::string& job) const;
  // InvalidArgument naming the job and the valid range when the task does not exist.
  absl::StatusOr<std::string> Address(const std::string& job, int index) const;
  // TF_CONFIG's JSON: the "cluster" object, and "task" when task_type is set.
  std::string ToJson() const;
};

struct ServerOptions {
  ClusterSpec cluster;
  std::string job;
  int task = 0;
  JobConfig job_config;  // used by the chief
  double connect_timeout_s = 60;
  // The chief stops the job on SIGINT and SIGTERM (signals.h) while it runs. A chief inside a
  // process that handles its own signals (the Python module) turns this off.
  bool stop_on_signals = true;
  SecurityFlags security;  // TLS and the job token of every channel and server (security.h)
  // The task's HTTP listener (/metrics, /healthz; the chief's status page at /): its port on the
  // task's host, 0 = none. It stays up `metrics_linger_s` after the job ended, so that a
  // scraper can read the final counters.
  int metrics_port = 0;
  double metrics_linger_s = 0;
  std::string log_format = "text";  // text, or json: one JSON object per log line
  // The data plane (docs/transport_ucx.md): how pulls and pushes travel between workers and
  // PS. "grpc"; "ucx" (the PS also listens on UCX, workers use it; an error if UCX cannot start
  // or be reached); "auto" (UCX where it works, else gRPC with one warning).
  std::string transport = "grpc";
};

// Runs this process's role until the job ends. The chief prints progress to stderr and the
// final result as one JSON line on stdout. Returns the process exit code.
int RunServer(const ServerOptions& options);

struct LaunchOptions {
  int num_ps = 2;
  int num_workers = 2;
  std::string binary;                    // the pstrain executable to start for every task
  std::vector<std::string> chief_flags;  // training flags passed on to the chief
  std::string log_level = "warn";        // for ps and worker processes
  // What every worker task runs (`pstrain launch -- COMMAND ARGS...`): COMMAND, looked up in
  // PATH as execvp does, with ARGS, TF_CONFIG naming its task, and stdout and stderr in its log
  // file. The chief's flags must then make it serve client programs (--model external). Empty:
  // `pstrain server` runs every worker.
  std::vector<std::string> worker_command;
  // One log file per task, <job>-<index>.log, for every task's stdout and stderr (the chief's
  // output is also shown by the launcher). Created if missing. Empty: the tasks write to the
  // launcher's own stdout and stderr, unless there is a worker command; then the logs go to a
  // new directory pstrain-launch-XXXXXX under $TMPDIR (or /tmp), which is left for reading.
  std::string log_dir;
  // Security of the local cluster (launch_secrets.h): a job token is generated for every launch
  // (or read from `auth_token_file`), and with `tls` a throw-away CA and one certificate that
  // every task uses (mutual TLS). `pstrain server` tasks get them as flags, worker commands in
  // their environment (PSTRAIN_AUTH_TOKEN, PSTRAIN_TLS_CERT/KEY/CA). They are written to the log
  // directory, or kept in memory files when there is none.
  bool tls = false;
  std::string auth_token_file;
  // Every `pstrain server` task gets an HTTP listener on a free port (--metrics_port, with
  // --metrics_linger 0); the launcher prints each one's /metrics address and the chief's status
  // page with the token.
  bool metrics = false;
  std::string log_format = "text";  // passed to every `pstrain server` task
  std::string transport = "grpc";   // passed to every `pstrain server` task (--transport)
  // Restarts: a `pstrain server` task that dies while the job runs (killed by a signal, or a ps
  // or worker that exits with an error before the chief ended the job) is started again with the
  // same command after a short backoff, on the same address, at most `max_restarts` times per
  // task; a killed chief with --restarted, from `checkpoint_dir` once the job saved a checkpoint
  // there, else from the user's own restore (RestartedChief, docs/recovery.md); a chief that
  // exited by itself is not restarted. Each restart is printed. With `recovery`, a worker
  // command (a client program taking tasks: --model external --rows N) that died is started
  // again too (but not the chief of such a job). A job without `recovery` (no task queue: the chief's --task_rows 0, or --model
  // external without --rows) is not restarted: it ends as without restarts.
  bool restart_failed = true;
  int max_restarts = 5;
  bool recovery = true;
  // The chief's checkpoint directory (--checkpoint_dir or --resume), "" if none was given: with
  // restarts, launch then gives the chief <log_dir>/checkpoints (without logs, a temporary
  // directory removed when the launch ends, however it ends but by SIGKILL) and, unless
  // `checkpoint_interval_given`, --checkpoint_every_secs 10.
  std::string checkpoint_dir;
  bool checkpoint_interval_given = false;
};

// Runs a whole cluster on 127.0.0.1 and waits for it, restarting the tasks that die (see
// LaunchOptions::restart_failed); stops every process it started (and the process group of each)
// on success, failure and SIGINT/SIGTERM. Returns the exit code: the chief's, unless a task
// failed first (one restarted max_restarts times already gives 1) (a worker command's own status, 1
// for another task) or a signal stopped the launch (128 + its number); a worker command that cannot
// be found gives 127 (126: not executable) before any process starts.
int Launch(const LaunchOptions& options);

}  // namespace pstrain
