#include "runtime/task_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/prometheus.h"
#include "common/rpc_metrics.h"
#include "ps/ps.h"
#include "worker/worker.h"

#ifndef PSTRAIN_VERSION
#define PSTRAIN_VERSION "unknown"  // the build defines it from the CMake project's version
#endif

namespace pstrain {
namespace {

constexpr auto kCounter = MetricType::kCounter;
constexpr auto kGauge = MetricType::kGauge;

// Bytes of the process's resident set, from /proc/self/statm; 0 if unreadable.
double ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * sysconf(_SC_PAGESIZE) : 0;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

void WriteProcess(const std::string& task, PrometheusText* out) {
  out->Begin("pstrain_build_info", kGauge, "Always 1; the pstrain version of this task.");
  out->Sample({{"version", PSTRAIN_VERSION}}, 1);
  const size_t colon = task.rfind(':');
  const std::string job = task.substr(0, colon);
  const std::string index = colon == std::string::npos ? "" : task.substr(colon + 1);
  out->Begin("pstrain_task_info", kGauge, "Always 1; which task of the cluster this is.");
  out->Sample({{"task", task}, {"job", job}, {"index", index}}, 1);
  out->Gauge("pstrain_process_resident_memory_bytes", "Resident memory of the task's process.",
             ResidentBytes());
  out->Counter("pstrain_process_cpu_seconds_total", "CPU time (user and system) of the process.",
               CpuSeconds());
  WriteRpcMetrics(out);
}

// One family with a sample per table: `value(stats)` labelled table=<name>.
template <typename Get>
void PerTable(const StatsResponse& s, PrometheusText* out, const char* name, MetricType type,
              const char* help, Get value) {
  out->Begin(name, type, help);
  for (const TableStats& t : s.tables()) {
    out->Sample({{"table", t.name()}}, static_cast<double>(value(t)));
  }
}

void WriteTables(const StatsResponse& s, PrometheusText* out) {
  if (s.tables_size() == 0) return;
  PerTable(s, out, "pstrain_ps_table_rows", kGauge, "Rows an embedding table holds on this PS.",
           [](const TableStats& t) { return t.rows(); });
  PerTable(s, out, "pstrain_ps_table_bytes", kGauge,
           "Memory of an embedding table on this PS: rows, optimizer slots, index.",
           [](const TableStats& t) { return t.bytes(); });
  PerTable(s, out, "pstrain_ps_table_version", kGauge, "Updates applied to an embedding table.",
           [](const TableStats& t) { return t.version(); });
  PerTable(s, out, "pstrain_ps_table_keys_looked_up_total", kCounter, "Keys looked up.",
           [](const TableStats& t) { return t.keys_looked_up(); });
  PerTable(s, out, "pstrain_ps_table_admitted_total", kCounter, "Keys given a row.",
           [](const TableStats& t) { return t.admitted(); });
  PerTable(s, out, "pstrain_ps_table_filtered_lookups_total", kCounter,
           "Lookups of keys not admitted yet.",
           [](const TableStats& t) { return t.filtered_lookups(); });
  PerTable(s, out, "pstrain_ps_table_gradient_rows_applied_total", kCounter,
           "Gradient rows applied to an embedding table.",
           [](const TableStats& t) { return t.gradient_rows_applied(); });
  PerTable(s, out, "pstrain_ps_table_filtered_gradients_total", kCounter,
           "Gradient rows dropped for a key without a row.",
           [](const TableStats& t) { return t.filtered_gradients(); });
  out->Begin("pstrain_ps_table_evicted_total", kCounter,
             "Rows evicted, by reason: age (--evict_after_steps) or cap (--table_max_rows/bytes).");
  for (const TableStats& t : s.tables()) {
    out->Sample({{"table", t.name()}, {"reason", "age"}}, t.evicted_by_age());
    out->Sample({{"table", t.name()}, {"reason", "cap"}}, t.evicted_by_cap());
  }
}

// A family with one sample per worker task: values[i] labelled worker=<i>.
void PerWorker(const google::protobuf::RepeatedField<int64_t>& values, const char* name,
               const char* help, PrometheusText* out) {
  out->Begin(name, kCounter, help);
  for (int i = 0; i < values.size(); ++i) {
    out->Sample({{"worker", std::to_string(i)}}, static_cast<double>(values[i]));
  }
}

void WritePs(ParameterServer* ps, PrometheusText* out) {
  StatsResponse s;
  std::vector<ParameterServer::VariableState> vars;
  ps->ReadMetrics(&s, &vars);
  out->Counter("pstrain_ps_pushes_total",
               "Gradients applied (async, ssp) or accumulated (sync), dense and sparse.",
               s.pushes_applied());
  out->Counter("pstrain_ps_pulls_total", "Pulls of dense variables served (status OK).",
               ServedRpcCount("Pull", absl::StatusCode::kOk));
  out->Counter("pstrain_ps_lookups_total", "Lookups of embedding rows served (status OK).",
               ServedRpcCount("Lookup", absl::StatusCode::kOk));
  out->Counter("pstrain_ps_updates_applied_total", "Optimizer applications.", s.updates_applied());
  out->Counter("pstrain_ps_stale_dropped_total", "Sync mode: gradients dropped as stale.",
               s.stale_dropped());
  out->Counter("pstrain_ps_nonfinite_rejected_total", "Pushes refused for a NaN or Inf.",
               s.nonfinite_rejected());
  out->Counter("pstrain_ps_duplicates_dropped_total",
               "Tagged pushes of a batch already applied (a redone task), not applied again.",
               s.duplicates_dropped());
  out->Counter("pstrain_ps_pulls_waited_total",
               "Pulls and lookups that waited (sync step or ssp clock).", s.pulls_waited());
  out->Gauge("pstrain_ps_max_clock_gap", "SSP: the largest clock gap a pull was served at.",
             s.max_clock_gap());
  PerWorker(s.pushes_by_worker(), "pstrain_ps_worker_pushes_total",
            "Pushes received, by worker task.", out);
  PerWorker(s.dropped_by_worker(), "pstrain_ps_worker_stale_dropped_total",
            "Sync mode: stale gradients dropped, by worker task.", out);

  out->Gauge("pstrain_ps_variables", "Dense variables (or shards) held.",
             static_cast<double>(vars.size()));
  out->Begin("pstrain_ps_variable_version", kGauge,
             "Updates applied to a variable: its version (in sync mode the global step).");
  for (const auto& v : vars) out->Sample({{"variable", v.name}}, static_cast<double>(v.version));
  out->Begin("pstrain_ps_variable_bytes", kGauge,
             "Memory of a variable: values, optimizer slots and a sync step's accumulator.");
  double total = 0;
  for (const auto& v : vars) {
    out->Sample({{"variable", v.name}}, static_cast<double>(v.bytes));
    total += v.bytes;
  }
  double table_bytes = 0;
  for (const TableStats& t : s.tables()) table_bytes += t.bytes();
  out->Begin("pstrain_ps_memory_bytes", kGauge,
             "Memory of what this PS holds, by kind: dense variables or embedding tables.");
  out->Sample({{"kind", "variables"}}, total);
  out->Sample({{"kind", "tables"}}, table_bytes);
  WriteTables(s, out);
}

void WriteWorker(const Worker& worker, PrometheusText* out) {
  const Worker::Progress p = worker.progress();
  out->Counter("pstrain_worker_steps_total", "Training steps this worker finished.", p.steps);
  out->Counter("pstrain_worker_examples_total", "Examples this worker trained on.", p.examples);
  out->Gauge("pstrain_worker_examples_per_second",
             "Examples per second between the worker's last two progress reports.",
             p.examples_per_sec);
  out->Gauge("pstrain_worker_loss", "Mean training loss over the last report's steps.", p.loss);
  out->Gauge("pstrain_worker_epoch", "Epoch in progress, from 0.", p.epoch);
  out->Gauge("pstrain_worker_done", "1 once the worker finished training.", p.done ? 1 : 0);
}

void WriteChief(const JobMonitor& monitor, PrometheusText* out) {
  const JobStatus j = monitor.Snapshot();
  static constexpr std::array<const char*, 5> kJobStates = {"starting", "running", "evaluating",
                                                            "succeeded", "failed"};
  out->Begin("pstrain_job_state", kGauge, "1 for the job's current state, 0 for the others.");
  for (const char* state : kJobStates) out->Sample({{"state", state}}, j.state == state ? 1 : 0);
  out->Gauge("pstrain_job_global_step", "The job's global step.", j.global_step);
  out->Gauge("pstrain_job_total_steps", "The job's length in global steps; 0 = not known.",
             j.total_steps);
  out->Gauge("pstrain_job_epoch", "Epoch in progress, from 1; 0 = not known.", j.epoch);
  out->Gauge("pstrain_job_epochs", "Epochs the job trains for; 0 = not known.", j.epochs);
  out->Gauge("pstrain_job_workers_alive", "Workers running or done, not failed or lost.",
             j.workers_alive);
  out->Gauge("pstrain_job_examples_per_second", "Examples per second of all workers.",
             j.examples_per_sec);
  out->Gauge("pstrain_job_loss", "The latest training loss the workers reported.", j.loss);
  out->Gauge("pstrain_job_elapsed_seconds", "Time since the job started training.",
             j.elapsed_seconds);
  if (j.eta_seconds >= 0) {
    out->Gauge("pstrain_job_eta_seconds", "Estimated time to the job's end.", j.eta_seconds);
  }
  static constexpr std::array<const char*, 5> kTaskStates = {"waiting", "running", "done", "failed",
                                                             "lost"};
  out->Begin("pstrain_job_tasks", kGauge, "Tasks of the cluster, by role and state.");
  for (const char* role : {"chief", "ps", "worker"}) {
    for (const char* state : kTaskStates) {
      int n = 0;
      for (const JobStatus::Task& t : j.tasks) n += t.job == role && t.state == state;
      out->Sample({{"job", role}, {"state", state}}, n);
    }
  }
  out->Begin("pstrain_job_ps_bytes", kGauge, "Bytes of variables placed on each PS task.");
  for (size_t i = 0; i < j.ps_bytes.size(); ++i) {
    out->Sample({{"ps", std::to_string(i)}}, static_cast<double>(j.ps_bytes[i]));
  }
}

}  // namespace

std::string MetricsPage(const MetricsSource& source) {
  PrometheusText out;
  WriteProcess(source.task, &out);
  if (source.ps != nullptr) WritePs(source.ps, &out);
  if (source.worker != nullptr) WriteWorker(*source.worker, &out);
  if (source.monitor != nullptr) WriteChief(*source.monitor, &out);
  return out.Take();
}

void ServeMetrics(HttpListener* listener, const MetricsSource& source) {
  listener->Handle("/metrics", /*open=*/true, [source](const HttpRequest&) {
    HttpResponse r;
    r.content_type = kPrometheusContentType;
    r.body = MetricsPage(source);
    return r;
  });
  listener->Handle("/healthz", /*open=*/true, [](const HttpRequest&) {
    HttpResponse r;
    r.body = "ok\n";
    return r;
  });
}

}  // namespace pstrain
